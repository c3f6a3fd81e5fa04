// Which SMs share a GPC? The CTAs of one thread-block cluster always run in one GPC, so
// launching clusters of the largest size the card allows, one CTA per SM (by shared memory),
// and joining the SMs that met in a cluster gives the GPCs. Prints one line per GPC: its SM ids.
// Used to read session 32's per-SM trace spans (bench/NOTES.md "Session 32").
//   nvcc -I. -O3 -std=c++17 -arch=sm_90a -o /tmp/gpc_map bench/kernels/results/attn_v32/gpc_map.cu && /tmp/gpc_map
//   (from the repository root)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <vector>

#include "tests/kernels/gpu_test_util.h"  // GPU_CHECK


__global__ void RecordSm(int* smid) {
  extern __shared__ int pad[];
  if (threadIdx.x == 0) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    pad[0] = static_cast<int>(s);
    smid[blockIdx.x] = pad[0];
  }
  // Stay long enough (~20 us) that the wave's clusters are resident together.
  const long long t0 = clock64();
  while (clock64() - t0 < 40000) {
  }
}

int Find(std::vector<int>& p, int x) { return p[x] == x ? x : p[x] = Find(p, p[x]); }

int main() {
  int sms = 0;
  GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int smem = 200 * 1024;  // one CTA per SM
  GPU_CHECK(cudaFuncSetAttribute(RecordSm, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  GPU_CHECK(cudaFuncSetAttribute(RecordSm, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  std::vector<int> parent(sms);
  std::iota(parent.begin(), parent.end(), 0);
  for (int cluster : {16, 8}) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.blockDim = dim3(32);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int max_clusters = 0;
    cfg.gridDim = dim3(cluster);
    if (cudaOccupancyMaxActiveClusters(&max_clusters, RecordSm, &cfg) != cudaSuccess ||
        max_clusters == 0) {
      cudaGetLastError();
      std::printf("cluster size %d: not launchable here\n", cluster);
      continue;
    }
    std::printf("cluster size %d: %d clusters resident at once (%d SMs)\n", cluster, max_clusters,
                max_clusters * cluster);
    const int grid = cluster * max_clusters * 8;  // 8 waves, so clusters land in different places
    int* d;
    GPU_CHECK(cudaMalloc(&d, grid * sizeof(int)));
    cfg.gridDim = dim3(grid);
    GPU_CHECK(cudaLaunchKernelEx(&cfg, RecordSm, d));
    GPU_CHECK(cudaDeviceSynchronize());
    std::vector<int> h(grid);
    GPU_CHECK(cudaMemcpy(h.data(), d, grid * sizeof(int), cudaMemcpyDeviceToHost));
    GPU_CHECK(cudaFree(d));
    for (int c = 0; c < grid / cluster; ++c) {
      for (int i = 1; i < cluster; ++i) {
        parent[Find(parent, h[c * cluster + i])] = Find(parent, h[c * cluster]);
      }
    }
  }
  std::map<int, std::vector<int>> gpcs;
  for (int s = 0; s < sms; ++s) gpcs[Find(parent, s)].push_back(s);
  std::printf("%zu groups of SMs that shared a cluster:\n", gpcs.size());
  for (const auto& [root, members] : gpcs) {
    std::printf("  %zu SMs:", members.size());
    for (int s : members) std::printf(" %d", s);
    std::printf("\n");
  }
  return 0;
}
