// Tokenizer speed: load time of each tokenizer folder and one-thread encoding speed of a text.
//     bench_tokenizer TEXT_FILE TOKENIZER_DIR... [--rounds N] [--ids-dir DIR]
// Prints one JSON object per folder: load_s and encode_s (medians of the rounds, wall clock),
// MB/s of the text (10^6 bytes per second), the same from the thread's CPU time (_cpu: what
// the code costs when other processes share the cores), token count; warns if
// decode(encode(text)) != text.
// --ids-dir writes the ids of each folder to DIR/<folder name>.json (a JSON array).
// benchmarks/bench_tokenizer.py runs it beside the JavaScript references.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <retnet/tokenizers.hpp>
#include <string>
#include <vector>

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> dirs;
  std::string text_file, ids_dir;
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--ids-dir" && i + 1 < argc) {
      ids_dir = argv[++i];
    } else if (text_file.empty()) {
      text_file = arg;
    } else {
      dirs.push_back(arg);
    }
  }
  if (text_file.empty() || dirs.empty()) {
    std::fprintf(stderr, "usage: %s TEXT_FILE TOKENIZER_DIR... [--rounds N]\n", argv[0]);
    return 2;
  }
  std::ifstream in(text_file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "error: cannot read %s\n", text_file.c_str());
    return 1;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    for (const std::string& dir : dirs) {
      std::vector<double> load, encode, load_cpu, encode_cpu;
      std::vector<int32_t> ids;
      for (int r = 0; r < rounds; ++r) {
        auto start = std::chrono::steady_clock::now();
        double cpu = thread_cpu_seconds();
        const retnet::HfTokenizer tok = retnet::HfTokenizer::load(dir);
        load.push_back(seconds_since(start));
        load_cpu.push_back(thread_cpu_seconds() - cpu);
        start = std::chrono::steady_clock::now();
        cpu = thread_cpu_seconds();
        ids = tok.encode(text);
        encode.push_back(seconds_since(start));
        encode_cpu.push_back(thread_cpu_seconds() - cpu);
        if (r == 0 && tok.decode(ids) != text)
          std::fprintf(stderr, "warning: %s does not round-trip the text\n", dir.c_str());
      }
      if (!ids_dir.empty()) {
        const std::string name = std::filesystem::path(dir).lexically_normal().filename().string();
        std::ofstream out(std::filesystem::path(ids_dir) / (name + ".json"));
        out << '[';
        for (size_t i = 0; i < ids.size(); ++i) out << (i ? "," : "") << ids[i];
        out << "]\n";
      }
      const double e = median(encode), e_cpu = median(encode_cpu);
      std::printf(
          "{\"tokenizer\": \"%s\", \"bytes\": %zu, \"tokens\": %zu, \"load_s\": %.4f, "
          "\"load_cpu_s\": %.4f, \"encode_s\": %.4f, \"encode_cpu_s\": %.4f, \"mb_per_s\": %.2f, "
          "\"mb_per_cpu_s\": %.2f, \"rounds\": %d}\n",
          dir.c_str(), text.size(), ids.size(), median(load), median(load_cpu), e, e_cpu,
          text.size() / e / 1e6, text.size() / e_cpu / 1e6, rounds);
      std::fflush(stdout);
    }
  } catch (const retnet::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
