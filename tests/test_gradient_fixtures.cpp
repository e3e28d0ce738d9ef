// Whole-model gradients against PyTorch autograd: tests/data/gradients/<family>.safetensors hold,
// for each tiny model folder, the float64 autograd loss and gradient of every parameter
// (scripts/fixtures/make_gradient_fixtures.py, independent of this library). The C++ gradient in
// float, in each of the three forms, must match: loss within 1e-5 relative, each tensor within
// 1e-4 relative (‖g − g_ref‖ / ‖g_ref‖); a missing or extra tensor fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "retnet/io/load.hpp"
#include "retnet/io/safetensors.hpp"
#include "retnet/model/dense_weights.hpp"
#include "retnet/model/model_gradients.hpp"

namespace {

using retnet::Form;
using retnet::Index;
const std::string kData = RETNET_TEST_DATA_DIR;

struct Fixture {
  std::vector<int32_t> tokens;
  double loss = 0;
  std::map<std::string, std::vector<double>> grads;  // checkpoint name -> values
};

Fixture read_fixture(const std::string& family) {
  const retnet::SafetensorsFile file(kData + "/gradients/" + family + ".safetensors");
  Fixture f;
  for (const retnet::TensorInfo& t : file.tensors()) {
    std::vector<double> v(static_cast<size_t>(t.numel()));
    file.read(t, v.data());
    if (t.name == "tokens") {
      for (double x : v) f.tokens.push_back(static_cast<int32_t>(x));
    } else if (t.name == "loss") {
      f.loss = v.at(0);
    } else {
      f.grads[t.name] = std::move(v);
    }
  }
  return f;
}

void check_family(const std::string& family, Form form, Index chunk) {
  SCOPED_TRACE(family + " " + retnet::form_name(form));
  const Fixture ref = read_fixture(family);
  ASSERT_GE(ref.tokens.size(), 2u);
  const auto model = retnet::load_model<float>(kData + "/" + family + "-tiny");
  const retnet::ModelConfig& c = model.config();
  const auto w = retnet::dense_weights(c, model.weights());
  // Each tensor's name in the folder's model.safetensors (prefix and output alias resolved).
  const retnet::CheckpointReader reader(kData + "/" + family + "-tiny");
  retnet::DenseModelWeights<float> grads;
  retnet::GradientOptions o;
  o.form = form;
  o.chunk_size = chunk;
  const double loss = retnet::sequence_loss_and_gradients(c, w, ref.tokens, o, grads);
  EXPECT_NEAR(loss, ref.loss, 1e-5 * std::abs(ref.loss));

  std::set<std::string> seen;
  double worst = 0;
  grads.visit(c, [&](const std::string& name, const auto& t, const std::vector<int64_t>&) {
    const std::string stored = reader.info(name).name;
    seen.insert(stored);
    const auto it = ref.grads.find(stored);
    if (it == ref.grads.end()) {
      ADD_FAILURE() << "gradient " << stored << " is not in the fixture";
      return;
    }
    ASSERT_EQ(static_cast<size_t>(t.size()), it->second.size()) << stored;
    double diff = 0, norm = 0;
    for (Index i = 0; i < t.size(); ++i) {  // row-major Matrix and vectors: data() in stored order
      const double g = static_cast<double>(t.data()[i]), r = it->second[static_cast<size_t>(i)];
      diff += (g - r) * (g - r);
      norm += r * r;
    }
    const double rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
    worst = std::max(worst, rel);
    EXPECT_LT(rel, 1e-4) << stored;
  });
  for (const auto& [name, values] : ref.grads)
    EXPECT_TRUE(seen.count(name)) << "fixture tensor " << name << " has no gradient";
  std::printf("%s %s: loss %.10f (autograd %.10f), worst tensor %.2e relative\n", family.c_str(),
              retnet::form_name(form), loss, ref.loss, worst);
}

class GradientFixtures : public ::testing::TestWithParam<const char*> {};

TEST_P(GradientFixtures, ParallelFormMatchesAutograd) {
  check_family(GetParam(), Form::kParallel, 0);
}
TEST_P(GradientFixtures, ChunkwiseFormMatchesAutograd) {
  check_family(GetParam(), Form::kChunkwise, 5);
}
TEST_P(GradientFixtures, RecurrentFormMatchesAutograd) {
  check_family(GetParam(), Form::kRecurrent, 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, GradientFixtures,
                         ::testing::Values("torchscale", "syncdoth", "fla"));

}  // namespace
