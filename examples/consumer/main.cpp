// Uses the installed package's kernels alone (retnet/kernels.hpp): runs the three forms of
// retention on the same random input and checks that they agree.
#include <cstdio>
#include <random>
#include <retnet/kernels.hpp>

int main() {
  using retnet::Tensor4;
  std::mt19937 rng(1);
  std::normal_distribution<double> normal;
  Tensor4<double> q(1, 2, 32, 8), k(1, 2, 32, 8), v(1, 2, 32, 12);
  for (auto* t : {&q, &k, &v})
    for (Eigen::Index i = 0; i < t->size(); ++i) t->data()[i] = normal(rng);
  const auto decays = retnet::default_decays<double>(2);

  const Tensor4<double> parallel = retnet::parallel_retention(q, k, v, decays);
  const Tensor4<double> recurrent = retnet::recurrent_retention(q, k, v, decays);
  const Tensor4<double> chunkwise = retnet::chunkwise_retention(q, k, v, decays, 5);
  const Eigen::Tensor<double, 0, Eigen::RowMajor> err1 = (parallel - recurrent).abs().maximum();
  const Eigen::Tensor<double, 0, Eigen::RowMajor> err2 = (parallel - chunkwise).abs().maximum();
  std::printf("retnet consumer: max |parallel - recurrent| = %.3g, |parallel - chunkwise| = %.3g\n",
              err1(), err2());
  return err1() < 1e-10 && err2() < 1e-10 ? 0 : 1;
}
