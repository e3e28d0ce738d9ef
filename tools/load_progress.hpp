// What the tools show on stderr while a model folder loads (LoadOptions::progress): on a
// terminal a line that updates in place, "loading models/x: 412/2730 MB (15 %)", at most ten
// times a second; then, on a terminal or not, one summary line,
// "loaded models/x: 2730 MB in 45.2 s (BF16 -> f32)", so a long load is never silent and a log
// records how long it took.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <retnet/retnet.hpp>
#include <string>

namespace retnet::tools {

class LoadProgressDisplay {
 public:
  /// `dir` names the folder in the lines; `out` is where they go (a terminal or not).
  explicit LoadProgressDisplay(std::string dir, std::FILE* out = stderr)
      : dir_(std::move(dir)),
        out_(out),
        terminal_(isatty(fileno(out)) == 1),
        start_(std::chrono::steady_clock::now()) {}

  /// For LoadOptions::progress; the display must outlive the load.
  std::function<void(const LoadProgress&)> callback() {
    return [this](const LoadProgress& p) { update(p); };
  }

  /// The seconds since the display was made (the load's start).
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  /// The summary line, once the load has returned (nothing when no progress was reported, as
  /// for random weights).
  void finish() {
    if (!reported_) return;
    std::fprintf(out_, "%sloaded %s: %.1f MB in %.1f s (%s -> %s)\n", terminal_ ? "\r\033[K" : "",
                 dir_.c_str(), last_.bytes_total / 1e6, seconds(), last_.stored.c_str(),
                 weight_type_name(last_.weights));
    std::fflush(out_);
  }

  /// Clears the updating line when the load failed, so that the error starts a line of its own.
  void abandon() {
    if (terminal_ && reported_) std::fputs("\r\033[K", out_);
  }

 private:
  void update(const LoadProgress& p) {
    last_ = p;
    reported_ = true;
    if (!terminal_) return;
    const auto now = std::chrono::steady_clock::now();
    if (p.bytes_done != 0 && p.bytes_done != p.bytes_total && now - shown_ < kInterval) return;
    shown_ = now;
    const double percent =
        p.bytes_total ? 100.0 * double(p.bytes_done) / double(p.bytes_total) : 100;
    std::fprintf(out_, "\r\033[Kloading %s: %.1f/%.1f MB (%.0f %%)", dir_.c_str(),
                 p.bytes_done / 1e6, p.bytes_total / 1e6, percent);
    std::fflush(out_);
  }

  static constexpr std::chrono::milliseconds kInterval{100};

  std::string dir_;
  std::FILE* out_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_, shown_{};
  LoadProgress last_;
  bool reported_ = false;
};

/// load_model<float>(dir) with `options`, showing its progress on stderr (LoadProgressDisplay);
/// `seconds`, when given, receives the load's wall time.
inline RetNetModel<float> load_model_showing_progress(const std::string& dir, LoadOptions options,
                                                      double* seconds = nullptr) {
  LoadProgressDisplay display(dir);
  options.progress = display.callback();
  try {
    RetNetModel<float> model = load_model<float>(dir, options);
    if (seconds) *seconds = display.seconds();
    display.finish();
    return model;
  } catch (...) {
    display.abandon();
    throw;
  }
}

}  // namespace retnet::tools
