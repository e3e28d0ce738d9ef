// GET /metrics's text (tools/serve/metrics.hpp): every line parses as Prometheus's text format
// 0.0.4 (a comment, or `name{labels} value` of a family declared by # TYPE), a histogram's
// buckets are cumulative and end in +Inf with the count, numbers and label values are written
// as the format reads them, and the HTTP side's counts add up.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "serve/metrics.hpp"

namespace {

using namespace retnet::serve;

struct Sample {
  std::string name, labels;
  double value = 0;
};

/// The samples of a scrape; fails the test on a line that is not a comment or a sample, and on
/// a sample of a family that has no # TYPE before it.
std::vector<Sample> parse(const std::string& text) {
  static const std::regex sample_line(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})? )"
      R"(([-+]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|Inf)|NaN))");
  static const std::regex type_line(
      R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  static const std::regex help_line(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*)");
  std::map<std::string, std::string> types;
  std::vector<Sample> samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.rfind("# HELP", 0) == 0) {
      EXPECT_TRUE(std::regex_match(line, help_line)) << line;
    } else if (std::regex_match(line, m, type_line)) {
      EXPECT_EQ(types.count(m[1]), 0u) << "two TYPE lines for " << m[1];
      types[m[1]] = m[2];
    } else if (std::regex_match(line, m, sample_line)) {
      std::string family = m[1];
      for (const std::string suffix : {"_bucket", "_sum", "_count"}) {
        if (family.size() <= suffix.size() ||
            family.compare(family.size() - suffix.size(), suffix.size(), suffix) != 0)
          continue;
        const std::string base = family.substr(0, family.size() - suffix.size());
        if (types.count(base) && types[base] == "histogram") family = base;
      }
      EXPECT_EQ(types.count(family), 1u) << "no # TYPE for " << line;
      const std::string v = m[3];
      samples.push_back({m[1], m[2], v == "NaN" ? NAN : std::strtod(v.c_str(), nullptr)});
    } else {
      ADD_FAILURE() << "not a line of the format: '" << line << "'";
    }
  }
  EXPECT_TRUE(text.empty() || text.back() == '\n');
  return samples;
}

const Sample* find(const std::vector<Sample>& samples, const std::string& name,
                   const std::string& labels = "") {
  for (const auto& s : samples)
    if (s.name == name && s.labels == labels) return &s;
  return nullptr;
}

TEST(ServeMetrics, EveryLineParsesAndEverySampleHasItsType) {
  Histogram h = first_token_histogram();
  for (double v : {0.001, 0.004, 0.3, 7.0}) h.observe(v);
  MetricsText m;
  m.counter("t_answers_total", "Answers by status.", "status",
            {{"200", 12}, {"400", 1}, {"413", 2}});
  m.counter("t_tokens_total", "Tokens.", 1234);
  m.gauge("t_queue", "Queued.", 0);
  m.histogram("t_wait_seconds", "Wait.", h);
  const auto samples = parse(m.str());
  ASSERT_EQ(samples.size(), 3u + 1 + 1 + (h.bounds().size() + 1) + 2);
  ASSERT_TRUE(find(samples, "t_answers_total", R"({status="413"})"));
  EXPECT_EQ(find(samples, "t_answers_total", R"({status="413"})")->value, 2);
  EXPECT_EQ(find(samples, "t_tokens_total")->value, 1234);
  EXPECT_EQ(find(samples, "t_queue")->value, 0);
  EXPECT_NE(m.str().find("# TYPE t_wait_seconds histogram\n"), std::string::npos);
  EXPECT_NE(m.str().find("# TYPE t_answers_total counter\n"), std::string::npos);
  EXPECT_NE(m.str().find("# TYPE t_queue gauge\n"), std::string::npos);
  EXPECT_EQ(MetricsText::kContentType, std::string("text/plain; version=0.0.4; charset=utf-8"));
}

TEST(ServeMetrics, HistogramBucketsAreCumulativeAndEndInInfWithTheCount) {
  Histogram h({0.1, 1, 10});
  // On a bound counts in that bucket (le: less or equal); beyond the last, only in +Inf.
  for (double v : {0.05, 0.1, 0.5, 1.0, 3.0, 11.0, 100.0}) h.observe(v);
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{2, 2, 1, 2}));
  MetricsText m;
  m.histogram("h_seconds", "H.", h);
  const auto samples = parse(m.str());
  const std::vector<std::pair<std::string, double>> want = {
      {"0.1", 2}, {"1", 4}, {"10", 5}, {"+Inf", 7}};
  double previous = 0;
  for (const auto& [le, count] : want) {
    const Sample* s = find(samples, "h_seconds_bucket", "{le=\"" + le + "\"}");
    ASSERT_TRUE(s) << le << " in\n" << m.str();
    EXPECT_EQ(s->value, count) << le;
    EXPECT_GE(s->value, previous);
    previous = s->value;
  }
  EXPECT_EQ(find(samples, "h_seconds_count")->value, 7);
  EXPECT_DOUBLE_EQ(find(samples, "h_seconds_sum")->value, 115.65);
  // The buckets come in order, +Inf last, then the sum and the count.
  const std::string& t = m.str();
  EXPECT_LT(t.find("le=\"0.1\""), t.find("le=\"1\""));
  EXPECT_LT(t.find("le=\"10\""), t.find("le=\"+Inf\""));
  EXPECT_LT(t.find("le=\"+Inf\""), t.find("h_seconds_sum"));
  EXPECT_LT(t.find("h_seconds_sum"), t.find("h_seconds_count"));
}

TEST(ServeMetrics, NumbersAndLabelValuesAreWrittenAsTheFormatReadsThem) {
  EXPECT_EQ(MetricsText::number(42), "42");
  EXPECT_EQ(MetricsText::number(0), "0");
  EXPECT_EQ(MetricsText::number(0.005), "0.005");
  EXPECT_EQ(MetricsText::number(2.5), "2.5");
  EXPECT_EQ(MetricsText::number(18446744073709551616.0), "1.8446744073709552e+19");
  EXPECT_EQ(MetricsText::number(0.1 + 0.2), "0.30000000000000004");  // 15 digits would lose it
  EXPECT_EQ(MetricsText::number(INFINITY), "+Inf");
  EXPECT_EQ(MetricsText::number(-INFINITY), "-Inf");
  EXPECT_EQ(MetricsText::number(NAN), "NaN");
  MetricsText m;
  m.counter("c_total", "C.", "path", {{"a\"b\\c\nd", 1}});
  EXPECT_NE(m.str().find(R"(c_total{path="a\"b\\c\nd"} 1)"), std::string::npos) << m.str();
  EXPECT_EQ(parse(m.str()).size(), 1u);
}

TEST(ServeMetrics, AnswersAndStreamsAddUpFromManyThreads) {
  ServerMetrics metrics;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        metrics.answered(i % 10 == 0 ? 400 + t : 200);
        metrics.stream_opened();
        metrics.stream_closed();
      }
    });
  metrics.stream_opened();
  for (auto& t : threads) t.join();
  const auto answers = metrics.answers();
  EXPECT_EQ(answers.at(200), 3600u);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(answers.at(400 + t), 100u);
  EXPECT_EQ(answers.size(), 5u);
  EXPECT_EQ(metrics.streams(), 1);
}

}  // namespace
