// Sylvester Hadamard matrices and the bit-reversal permutation (quant.md A.3).
//   H_1 = [1], H_2n = [[H, H], [H, -H]] / sqrt(2)  =>  H[i][j] = (-1)^popcount(i & j) / sqrt(d).
// H is symmetric, orthogonal and its own inverse; d must be a power of two.
#ifndef OSCARKV_LIB_QUANT_HADAMARD_H_
#define OSCARKV_LIB_QUANT_HADAMARD_H_

#include <vector>

namespace oscarkv::quant {

constexpr bool IsPowerOfTwo(int d) { return d > 0 && (d & (d - 1)) == 0; }

// Normalized H_d, row-major d x d. d must be a power of two (CHECK-fails otherwise).
std::vector<double> HadamardMatrix(int d);
// x <- x * H_d in place (== H_d * x, H is symmetric), O(d log d) butterflies. d a power of two.
void FastHadamardTransform(float* x, int d);
// br(i): i with its log2(d) low bits reversed (d = 8: 0 4 2 6 1 5 3 7). d a power of two.
std::vector<int> BitReversalPermutation(int d);

}  // namespace oscarkv::quant

#endif  // OSCARKV_LIB_QUANT_HADAMARD_H_
