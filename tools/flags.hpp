// The flag tables of the tools (tools/retnet.cpp, tools/serve.cpp): each command declares every
// flag once, with its name, what it takes, its default, its range and its help line; the same
// declarations parse the command line, check it and write --help. A bad flag is a UsageError
// with one line that names the command, the flag and the problem.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <retnet/io/load.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace retnet::tools {

/// A command line the declarations refuse (the tools exit with status 2).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One flag of a command: what it is called, what it takes, its default and its range.
struct Flag {
  enum Kind { kSwitch, kText, kInteger, kNumber };
  const char* name;
  Kind kind;
  const char* value_name;  // shown in --help: "N", "T", ...; nullptr for switches
  const char* fallback;    // default value (parsed like a given one); nullptr: none
  const char* help;
  double min = 0, max = 0;  // inclusive range of kInteger and kNumber
};

inline Flag text(const char* name, const char* value_name, const char* fallback, const char* help) {
  return {name, Flag::kText, value_name, fallback, help};
}
inline Flag integer(const char* name, const char* value_name, const char* fallback, double min,
                    double max, const char* help) {
  return {name, Flag::kInteger, value_name, fallback, help, min, max};
}
inline Flag number(const char* name, const char* value_name, const char* fallback, double min,
                   double max, const char* help) {
  return {name, Flag::kNumber, value_name, fallback, help, min, max};
}
inline Flag toggle(const char* name, const char* help) {
  return {name, Flag::kSwitch, nullptr, nullptr, help};
}

/// Threads beyond a few per hardware thread only add overhead (and OpenMP fails somewhere in the
/// tens of thousands), so --threads is capped at 4 x the hardware's.
inline double max_threads() {
  return 4.0 * std::max(1u, std::thread::hardware_concurrency());
}

inline Flag threads_flag() {
  return integer("--threads", "N", nullptr, 1, max_threads(),
                 "threads (default: all cores; at most 4 x the hardware threads)");
}

/// The parsed command line of one command; every lookup goes through the flag's declaration.
/// `-h` and `--help` set "--help" whatever the table holds.
class Args {
 public:
  Args(const std::string& command, const std::vector<Flag>& flags, int argc, char** argv)
      : command_(command), flags_(flags) {
    for (int i = 0; i < argc; ++i) {
      const std::string arg = std::string(argv[i]) == "-h" ? "--help" : argv[i];
      if (arg == "--help") {
        values_[arg] = "1";
        continue;
      }
      const Flag* f = find(arg);
      if (!f)
        throw UsageError(command + ": unknown argument '" + arg + "' (see retnet " + command +
                         " --help)");
      if (f->kind == Flag::kSwitch) {
        values_[arg] = "1";
      } else {
        if (i + 1 >= argc) throw UsageError(command + ": " + arg + " needs a value");
        values_[arg] = argv[++i];
      }
    }
    for (const auto& [name, value] : values_)
      if (name != "--help") check(*find(name), value);
  }

  bool help() const { return has("--help"); }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name) const { return value(name); }
  int64_t integer(const std::string& name) const { return std::stoll(value(name)); }
  double number(const std::string& name) const { return std::stod(value(name)); }

 private:
  const Flag* find(const std::string& name) const {
    for (const Flag& f : flags_)
      if (name == f.name) return &f;
    return nullptr;
  }

  std::string value(const std::string& name) const {
    if (auto it = values_.find(name); it != values_.end()) return it->second;
    const Flag* f = find(name);
    if (!f || !f->fallback) throw UsageError(command_ + ": " + name + " is required");
    return f->fallback;
  }

  /// Integers are read as 64-bit and numbers as doubles; anything malformed or outside the
  /// declared range is refused, never wrapped or saturated.
  void check(const Flag& f, const std::string& v) const {
    if (f.kind != Flag::kInteger && f.kind != Flag::kNumber) return;
    const std::string range = "[" + format(f.min, f) + ", " + format(f.max, f) + "]";
    char* end = nullptr;
    errno = 0;
    if (f.kind == Flag::kInteger) {
      const long long i = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0')
        throw UsageError(command_ + ": " + f.name + " expects an integer, got '" + v + "'");
      if (errno == ERANGE || i < f.min || i > f.max)
        throw UsageError(command_ + ": " + f.name + " must be in " + range + ", got " + v);
      return;
    }
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(x))
      throw UsageError(command_ + ": " + f.name + " expects a number, got '" + v + "'");
    if (x < f.min || x > f.max)
      throw UsageError(command_ + ": " + f.name + " must be in " + range + ", got " + v);
  }

  static std::string format(double x, const Flag& f) {
    if (f.kind == Flag::kInteger) return std::to_string(static_cast<long long>(x));
    std::ostringstream s;
    s << x;
    return s.str();
  }

  std::string command_;
  const std::vector<Flag>& flags_;
  std::map<std::string, std::string> values_;
};

/// --help text from the declarations: the usage line, a summary, then a line per flag.
inline std::string help_text(const std::string& usage, const std::string& summary,
                             const std::vector<Flag>& flags) {
  std::string out = "usage: " + usage + "\n" + summary + "\n";
  for (const Flag& f : flags) {
    std::string left =
        std::string("  ") + f.name + (f.value_name ? " " : "") + (f.value_name ? f.value_name : "");
    left.resize(std::max<size_t>(left.size() + 2, 24), ' ');
    out += left + f.help + (f.fallback ? std::string(" (default ") + f.fallback + ")" : "") + "\n";
  }
  return out;
}

/// --weights: the type of the linear maps (ops/weight_type.hpp), on every command that loads a
/// model.
inline Flag weights_flag() {
  return text("--weights", "T", nullptr,
              "weight type: f32 | bf16 | q8 | q4 (default: the checkpoint's own, f32 if another)");
}

/// LoadOptions from --weights; a bad name is a usage error.
inline LoadOptions load_options(const Args& args) {
  LoadOptions options;
  if (args.has("--weights")) try {
      options.weights = parse_weight_type(args.str("--weights"));
    } catch (const InvalidArgument& e) {
      throw UsageError(std::string("--weights: ") + e.what());
    }
  return options;
}

}  // namespace retnet::tools
