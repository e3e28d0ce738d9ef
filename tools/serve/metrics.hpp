// GET /metrics of `retnet serve` in Prometheus's text exposition format (version 0.0.4): a
// histogram type for the engine's time to first token, the counts the HTTP side keeps (answers
// by status, streams open), and MetricsText, which writes metric families as
// `# HELP`, `# TYPE` and `name{labels} value` lines. Plain code: no client library.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace retnet::serve {

/// Observed values counted in buckets by upper bound (each value in the first bucket whose bound
/// is at least the value, or in the last, unbounded one), with their sum and number.
class Histogram {
 public:
  /// `bounds` ascending; a last bucket (+Inf) is added.
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

  void observe(double value) {
    const auto at = std::lower_bound(bounds_.begin(), bounds_.end(), value);
    ++counts_[size_t(at - bounds_.begin())];
    sum_ += value;
    ++count_;
  }

  const std::vector<double>& bounds() const { return bounds_; }
  /// Per bucket, not cumulative; the last is the +Inf bucket's own.
  const std::vector<uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

/// Seconds from a request's arrival to its first token: from a short prompt on an idle server
/// to one read behind long prompts.
inline Histogram first_token_histogram() {
  return Histogram({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
}

/// What the HTTP side counts: answers by status (the HTTP layer's own refusals too) and
/// streamed answers open. Safe from any thread.
class ServerMetrics {
 public:
  void answered(int status) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++answers_[status];
  }
  std::map<int, uint64_t> answers() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return answers_;
  }

  void stream_opened() { ++streams_; }
  void stream_closed() { --streams_; }
  int64_t streams() const { return streams_; }

 private:
  mutable std::mutex mutex_;
  std::map<int, uint64_t> answers_;
  std::atomic<int64_t> streams_{0};
};

/// The text of a scrape: each family written once with its HELP and TYPE lines, then its
/// samples. Names are the callers' constants ([a-zA-Z_:][a-zA-Z0-9_:]*); label values are
/// escaped.
class MetricsText {
 public:
  /// The Content-Type of the format.
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

  using Labelled = std::vector<std::pair<std::string, double>>;  // label value, sample value

  void counter(const char* name, const char* help, double value) {
    family(name, help, "counter");
    sample(name, "", value);
  }
  /// A counter with one label: a sample per (label value, count).
  void counter(const char* name, const char* help, const char* label, const Labelled& values) {
    family(name, help, "counter");
    for (const auto& [label_value, value] : values) sample(name, labels(label, label_value), value);
  }
  void gauge(const char* name, const char* help, double value) {
    family(name, help, "gauge");
    sample(name, "", value);
  }
  /// NAME_bucket{le="..."} (cumulative, the last le="+Inf"), NAME_sum and NAME_count.
  void histogram(const char* name, const char* help, const Histogram& h) {
    family(name, help, "histogram");
    const std::string base = name;
    uint64_t below = 0;
    for (size_t i = 0; i < h.counts().size(); ++i) {
      below += h.counts()[i];
      const std::string le = i < h.bounds().size() ? number(h.bounds()[i]) : "+Inf";
      sample(base + "_bucket", labels("le", le), double(below));
    }
    sample(base + "_sum", "", h.sum());
    sample(base + "_count", "", double(h.count()));
  }

  const std::string& str() const { return text_; }

  /// A value as the format writes it: integers (below 2^53) without a fraction, others in the
  /// shortest of 15 or 17 digits that reads back the same (0.005, not 0.0050000000000000001),
  /// and NaN, +Inf and -Inf by name.
  static std::string number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    char text[32];
    if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
      std::snprintf(text, sizeof text, "%.0f", v);
      return text;
    }
    std::snprintf(text, sizeof text, "%.15g", v);
    if (std::strtod(text, nullptr) != v) std::snprintf(text, sizeof text, "%.17g", v);
    return text;
  }

 private:
  void family(const char* name, const char* help, const char* type) {
    text_ += std::string("# HELP ") + name + " " + help + "\n";
    text_ += std::string("# TYPE ") + name + " " + type + "\n";
  }
  void sample(const std::string& name, const std::string& label_text, double value) {
    text_ += name + label_text + " " + number(value) + "\n";
  }
  static std::string labels(const char* name, const std::string& value) {
    std::string escaped;
    for (char c : value) {
      if (c == '\\' || c == '"') escaped += '\\';
      if (c == '\n') {
        escaped += "\\n";
        continue;
      }
      escaped += c;
    }
    return std::string("{") + name + "=\"" + escaped + "\"}";
  }

  std::string text_;
};

}  // namespace retnet::serve
