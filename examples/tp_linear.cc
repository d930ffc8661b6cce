// tp_linear: a tensor-parallel MLP block, Megatron style: Y = relu(X A) B over n ranks.
//
//   ColumnParallelLinear  A [H, F] split by columns: rank r holds A[:, r*F/n, (r+1)*F/n) and computes its
//                         slice of X A with no communication; relu acts on the slice, also locally.
//   RowParallelLinear     B [F, H] split by rows: rank r holds B[r*F/n, (r+1)*F/n) and computes a partial
//                         Y_r = relu(X A_r) B_r of the full shape; one all-reduce (sum) gives Y on every rank.
//
// (Backward mirrors it: the column-parallel layer all-reduces the gradient of X; the row-parallel one
// needs no communication.) Every rank also computes Y alone, with the whole A and B, and prints the
// largest difference. The inputs are small multiples of powers of two, so both sums are exact.
//
//   mpcomm launch -n 4 -- ./tp_linear        (n must divide F = 32)
#include <mpcomm/mpcomm.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

// Shapes: T tokens, H hidden, F = 4H the MLP's inner width.
constexpr int T = 4, H = 8, F = 4 * H;

// Deterministic weights and inputs, the same on every rank.
float x_at(int t, int h) { return static_cast<float>((t * 7 + h * 3) % 5 - 2) / 4; }
float a_at(int h, int f) { return static_cast<float>((h + 2 * f) % 7 - 3) / 8; }
float b_at(int f, int h) { return static_cast<float>((3 * f + h) % 9 - 4) / 8; }

int main() try {
  auto comm = mpcomm::init_from_env();
  const int n = comm->size(), r = comm->rank();
  if (F % n != 0) throw mpcomm::InvalidArgument("tp_linear: the ranks (" + std::to_string(n) + ") must divide F = 32");
  const int Fr = F / n, f0 = r * Fr;  // this rank's slice of the inner dimension

  // ColumnParallelLinear + relu: Z_r = relu(X A[:, f0 : f0 + Fr]), shape [T, Fr]. No communication.
  std::vector<float> z(T * Fr);
  for (int t = 0; t < T; ++t)
    for (int f = 0; f < Fr; ++f) {
      float s = 0;
      for (int h = 0; h < H; ++h) s += x_at(t, h) * a_at(h, f0 + f);
      z[t * Fr + f] = std::fmax(s, 0.0f);
    }
  // RowParallelLinear: Y_r = Z_r B[f0 : f0 + Fr, :], shape [T, H], then Y = sum over ranks of Y_r.
  std::vector<float> y(T * H, 0.0f);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int f = 0; f < Fr; ++f) y[t * H + h] += z[t * Fr + f] * b_at(f0 + f, h);
  comm->allreduce(y.data(), y.data(), y.size(), mpcomm::DataType::float32, mpcomm::ReduceOp::sum);

  // The reference: the same block on one rank, with the whole A and B.
  float max_diff = 0;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      float ref = 0;
      for (int f = 0; f < F; ++f) {
        float s = 0;
        for (int k = 0; k < H; ++k) s += x_at(t, k) * a_at(k, f);
        ref += std::fmax(s, 0.0f) * b_at(f, h);
      }
      max_diff = std::fmax(max_diff, std::fabs(ref - y[t * H + h]));
    }
  const bool ok = max_diff == 0;
  std::printf("tp_linear rank %d of %d: columns [%d, %d) of A, rows [%d, %d) of B; Y[0][0] %g; max diff to one rank %g: %s\n",
              r, n, f0, f0 + Fr, f0, f0 + Fr, y[0], max_diff, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
} catch (const mpcomm::Error& e) {
  std::fprintf(stderr, "tp_linear: %s\n", e.what());
  return 1;
}
