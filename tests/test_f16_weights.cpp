// f16 (IEEE binary16) weights: products against a brute-force loop over the halves, the demo
// model (stored in F16) computing with its halves as they are, and `convert`'s F16 folders. The
// shared checks of every weight type (decoded values, errors, products, saved folders) are in
// test_weight_types.cpp, which runs them for f16 too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <retnet/retnet.hpp>
#include <string>

#include "temp_dir.hpp"

namespace {

using retnet::DType;
using retnet::Form;
using retnet::Index;
using retnet::LinearWeight;
using retnet::LoadOptions;
using retnet::Matrix;
using retnet::WeightType;

Matrix<float> random_matrix(Index rows, Index cols, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  Matrix<float> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = float(normal(rng));
  return m;
}

TEST(F16Weights, NamedAndParsed) {
  EXPECT_EQ(retnet::parse_weight_type("f16"), WeightType::kF16);
  EXPECT_STREQ(retnet::weight_type_name(WeightType::kF16), "f16");
  try {
    retnet::parse_weight_type("f8");
    FAIL() << "f8 was accepted";
  } catch (const retnet::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("(expected f32, f16, bf16, q8 or q4)"), std::string::npos)
        << e.what();
  }
}

TEST(F16Weights, ProductsAreTheSumOverTheHalves) {
  // y[i, r] = Σ_q x[i, q] · half(W[r, q]), summed here in double over the halves decoded one by
  // one, for one row of x (decoded in registers) and for blocks of rows (decoded tiles), with W's
  // rows and columns off the panel (48), packet (8, 16) and depth (128) boundaries.
  std::mt19937 rng(11);
  for (Index cols : {1, 7, 33, 130, 300}) {
    for (Index w_rows : {1, 47, 49, 101}) {
      const Matrix<float> w = random_matrix(w_rows, cols, rng);
      const LinearWeight<float> packed(w, WeightType::kF16);
      for (Index rows : {1, 2, 3, 9, 17, 300}) {
        const Matrix<float> x = random_matrix(rows, cols, rng);
        Matrix<float> y;
        retnet::linear(x, packed, y);
        ASSERT_EQ(y.rows(), rows);
        ASSERT_EQ(y.cols(), w_rows);
        for (Index i = 0; i < rows; ++i)
          for (Index r = 0; r < w_rows; ++r) {
            double want = 0, magnitude = 0;
            for (Index q = 0; q < cols; ++q) {
              const double h = retnet::half_to_float(retnet::float_to_half(w(r, q)));
              want += double(x(i, q)) * h;
              magnitude += std::abs(double(x(i, q)) * h);
            }
            // float rounding of a chain of `cols` multiply-adds
            const double bound = 1e-6 * magnitude * std::sqrt(double(cols)) + 1e-30;
            ASSERT_LE(std::abs(double(y(i, r)) - want), bound)
                << rows << " x " << cols << " times " << w_rows << " at " << i << "," << r;
          }
        // One row alone (decoded in registers) gives the bits of the same row among many
        // (decoded tiles).
        Matrix<float> one;
        retnet::linear(Matrix<float>(x.row(rows - 1)), packed, one);
        ASSERT_EQ(one.row(0), y.row(rows - 1)) << rows << " x " << cols;
      }
    }
  }
}

TEST(F16Weights, HalvesAreKeptAndRangeIsChecked) {
  // Values that are halves (subnormals, the largest, signed zero) are stored as they are.
  Matrix<float> w(2, 5);
  w << 0x1p-24f, -0x1p-14f, 65504.f, -0.0f, 1.f / 3, 0.5f, -2.f, 0x1.ffcp-15f, 1e-8f, 3.f;
  const Matrix<float> got = LinearWeight<float>(w, WeightType::kF16).to_matrix();
  for (Index i = 0; i < w.size(); ++i)
    EXPECT_EQ(retnet::float_to_bits(got.data()[i]),
              retnet::float_to_bits(retnet::half_to_float(retnet::float_to_half(w.data()[i]))))
        << i;
  EXPECT_EQ(got(1, 0), 0.5f);
  EXPECT_EQ(got(0, 2), 65504.f);
  // A finite weight that binary16 cannot hold is refused, not made infinite.
  w(1, 3) = 65520.f;  // rounds up past the largest half
  try {
    LinearWeight<float> bad(w, WeightType::kF16);
    FAIL() << "65520 was accepted as f16";
  } catch (const retnet::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("beyond binary16's range"), std::string::npos) << e.what();
  }
  w(1, 3) = 65519.f;  // rounds down to 65504
  EXPECT_EQ(LinearWeight<float>(w, WeightType::kF16).at(1, 3), 65504.f);
}

const std::string kDemo = std::string(RETNET_SOURCE_DIR) + "/models/shakespeare";

// One thread: these tests compare values, not speed, and a busy machine makes OpenMP's barriers
// (one per product of a decoding step) cost more than the products.
class F16Models : public ::testing::Test {
 protected:
  void SetUp() override {
    threads_before_ = retnet::num_threads();
    retnet::set_num_threads(1);
  }
  void TearDown() override { retnet::set_num_threads(threads_before_); }
  int threads_before_ = 1;
};

retnet::TokenMatrix demo_tokens(int64_t vocab = 256) {
  const std::string text = "ROMEO:\nBut soft, what light through yonder window breaks?\n";
  retnet::TokenMatrix tokens(1, Index(text.size()));
  for (size_t i = 0; i < text.size(); ++i) tokens(0, Index(i)) = int32_t(uint8_t(text[i]) % vocab);
  return tokens;
}

TEST_F(F16Models, TheDemoModelKeepsItsHalves) {
  // The demo checkpoint stores every tensor as F16: it loads as f16 by default, every weight is
  // the checkpoint's half as it is (the f32 model holds the same values, exactly widened), and
  // the logits are the f32 model's: the same values in the same chains of multiply-adds (bound:
  // 1e-6 of the largest logit, for a summation order that might differ; measured 0).
  const auto f16 = retnet::load_model<float>(kDemo);
  ASSERT_EQ(f16.config().weights, WeightType::kF16);
  const auto forced = retnet::load_model<float>(kDemo, LoadOptions{WeightType::kF16});
  const auto f32 = retnet::load_model<float>(kDemo, LoadOptions{WeightType::kF32});
  ASSERT_EQ(f32.config().weights, WeightType::kF32);
  // Half the bytes: 2 per weight of a linear map (the norms' few weights stay float32).
  const double ratio = double(f16.weights().size_bytes(f16.config())) /
                       double(f32.weights().size_bytes(f32.config()));
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 0.505);
  EXPECT_EQ(f16.weights().output.to_matrix(), f32.weights().output.to_matrix());
  EXPECT_EQ(f16.weights().layers[0].ffn.fc2.to_matrix(),
            f32.weights().layers[0].ffn.fc2.to_matrix());
  const retnet::TokenMatrix tokens = demo_tokens();
  for (Form form : {Form::kParallel, Form::kChunkwise, Form::kRecurrent}) {
    const Matrix<float> a = f16.forward(tokens, form), b = f32.forward(tokens, form);
    const double diff = (a - b).cwiseAbs().maxCoeff(), scale = b.cwiseAbs().maxCoeff();
    std::printf("demo %s: f16 vs f32 logits differ by at most %g (largest %g)\n",
                retnet::form_name(form), diff, scale);
    EXPECT_LE(diff, 1e-6 * scale) << retnet::form_name(form);
    EXPECT_EQ(forced.forward(tokens, form), a) << retnet::form_name(form);
  }
}

TEST_F(F16Models, ConvertedFoldersStoreF16AndLoadWithoutConverting) {
  // An f32 fixture converted to f16 (as `retnet convert --weights f16` does): its linear maps are
  // F16 tensors holding the rounded values, it loads back as f16 by default, and the demo's own
  // halves survive a round trip bit for bit.
  for (const std::string& source :
       {std::string(RETNET_TEST_DATA_DIR) + "/torchscale-tiny", kDemo}) {
    const auto converted = retnet::load_model<float>(source, LoadOptions{WeightType::kF16});
    retnet::testing::TempDir dir;
    retnet::save_model(dir.str(), converted.config(), converted.weights());
    retnet::CheckpointReader reader(dir.str());
    int f16_tensors = 0;
    for (const std::string& name : reader.names())
      if (name.find("proj.weight") != std::string::npos ||
          name.find("fc1.weight") != std::string::npos) {
        ASSERT_EQ(name.rfind(reader.prefix(), 0), 0u) << name;
        EXPECT_EQ(reader.dtype(name.substr(reader.prefix().size())), DType::F16) << name;
        ++f16_tensors;
      }
    EXPECT_GT(f16_tensors, 4) << source;
    const auto loaded = retnet::load_model<float>(dir.str());
    ASSERT_EQ(loaded.config().weights, WeightType::kF16) << source;
    EXPECT_EQ(loaded.weights().output.to_matrix(), converted.weights().output.to_matrix());
    EXPECT_EQ(loaded.weights().layers[0].retention.q_proj.to_matrix(),
              converted.weights().layers[0].retention.q_proj.to_matrix());
    const retnet::TokenMatrix tokens = demo_tokens(converted.config().vocab_size);
    EXPECT_EQ(loaded.forward(tokens, Form::kRecurrent), converted.forward(tokens, Form::kRecurrent))
        << source;
  }
}

TEST(F16Weights, DoubleModelsRefuseF16) {
  try {
    retnet::load_model<double>(kDemo, LoadOptions{WeightType::kF16});
    FAIL() << "a double model took f16 weights";
  } catch (const retnet::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("only float models hold f16"), std::string::npos)
        << e.what();
  }
}

}  // namespace
