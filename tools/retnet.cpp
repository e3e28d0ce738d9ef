// The `retnet` command line: generate text, score text, benchmark, tokenize, describe and
// convert model folders. A thin frontend over the library: each command is a header of
// tools/cli/ with a struct of typed flags (tools/flags.hpp: name, default, range and help,
// declared once, which drive both parsing and --help) and a function that runs it.
// Every error ends in one line on stderr, "retnet COMMAND: problem", and a non-zero exit status:
// 2 for a command line refused before any work, 1 for a failure while working. Bare `retnet`
// prints the overview to stderr with status 2 (an incomplete command line); `retnet --help`
// prints it to stdout with status 0, `retnet --version` the version.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iterator>
#include <new>
#include <retnet/retnet.hpp>
#include <string>

#include "cli/bench.hpp"
#include "cli/chat.hpp"
#include "cli/convert.hpp"
#include "cli/generate.hpp"
#include "cli/grad.hpp"
#include "cli/info.hpp"
#include "cli/score.hpp"
#include "cli/tokenize.hpp"
#include "cli/train.hpp"
#include "flags.hpp"

#ifndef RETNET_VERSION
#error "RETNET_VERSION (the CMake project version) is defined by tools/CMakeLists.txt"
#endif

namespace {

using namespace retnet::cli;

struct Command {
  const char* name;
  const char* usage;
  const char* summary;
  int (*main)(const Command&, int argc, char** argv);  // argv: the arguments after the name
};

/// Parses a command's flags into its struct, then runs it (or writes its --help).
template <typename Flags, int (*Run)(const Flags&)>
int run(const Command& command, int argc, char** argv) {
  const auto line = retnet::tools::parse_command_line<Flags>(command.name, argc, argv);
  if (!line.help) return Run(line.flags);
  const std::string help =
      retnet::tools::flags_help<Flags>(command.name, command.usage, command.summary);
  std::fputs(help.c_str(), stdout);
  return 0;
}

const Command kCommands[] = {
    {"generate", "retnet generate -m DIR [options]",
     "Generates text from a prompt and streams it to stdout; load time, speeds and seed go "
     "to stderr.",
     run<GenerateFlags, generate>},
    {"chat", "retnet chat -m DIR [--chat-template FILE] [--system TEXT] [options]",
     "A conversation in the terminal; the model state is kept between turns.",
     run<ChatFlags, chat>},
    {"score", "retnet score -m DIR (--text S | --file PATH | --tokens 1,2,3) [options]",
     "How well the model predicts a sequence: each token from the ones before it.",
     run<ScoreFlags, score>},
    {"grad", "retnet grad -m DIR (--tokens 1,2,3 | --text S) --out F.safetensors [options]",
     "The mean next-token loss of one sequence and the gradient of every parameter, written "
     "as float32 under the checkpoint's tensor names.",
     run<GradFlags, grad>},
    {"bench", "retnet bench (-m DIR | --config CONFIG.json) [options]",
     "Times reading a prompt and decoding after it.", run<BenchFlags, bench>},
    {"tokenize", "retnet tokenize -m DIR (--text S | --file PATH) [--json]",
     "Prints the token ids of a text (the tokenizer's default special tokens included).",
     run<TokenizeFlags, tokenize>},
    {"detokenize", "retnet detokenize -m DIR --ids 1,2,3",
     "Writes the text of token ids to stdout, byte for byte (special tokens skipped).",
     run<DetokenizeFlags, detokenize>},
    {"convert", "retnet convert -m DIR -o OUT --weights f16|bf16|q8|q4|f32",
     "Writes a copy of a model folder with its weights in another type (loads without "
     "converting again).",
     run<ConvertFlags, convert>},
    {"info", "retnet info -m DIR [--json]",
     "Describes a model folder: family, sizes, parameters, stored dtypes, tokenizer.",
     run<InfoFlags, info>},
    {"train", "retnet train (--config FILE.json | -m DIR) --data FILE --out DIR [options]",
     "Trains a model on a text file (AdamW, warmup and cosine decay); checkpoints that "
     "generate and score load.",
     run<TrainFlags, train>},
};

std::string overview() {
  std::string out = "usage: retnet COMMAND [options]\n";
  for (const Command& c : kCommands) {
    std::string name = std::string("  ") + c.name;
    name.resize(13, ' ');
    out += name + c.summary + "\n";
  }
  out += "  serve      An OpenAI-compatible HTTP server (the retnet-serve executable).\n";
  return out +
         "Run `retnet COMMAND --help` for the options of each, `retnet --version` for the "
         "version.\n";
}

/// "did you mean generate?" for a command a typo or two away, else the pointer to --help.
std::string command_suggestion(const std::string& name) {
  std::string names[std::size(kCommands) + 1];
  for (size_t i = 0; i < std::size(kCommands); ++i) names[i] = kCommands[i].name;
  names[std::size(kCommands)] = "serve";
  const std::string* best = nullptr;
  size_t best_distance = 3;  // two edits at most: beyond that the guess is noise
  for (const std::string& known : names) {
    const size_t d = retnet::tools::edit_distance(name, known);
    if (d < best_distance) best_distance = d, best = &known;
  }
  return best && name.size() > 3 ? "did you mean " + *best + "?" : "see retnet --help";
}

/// The one line of an error of `command`: "retnet COMMAND: problem". A message that already
/// starts with "COMMAND: " (the flag table's, or a library function named like the command,
/// "generate: the prompt is empty") keeps one prefix, not two.
std::string error_line(const std::string& command, const std::string& message) {
  const std::string own = command + ": ";
  const bool prefixed = message.compare(0, own.size(), own) == 0;
  return "retnet " + own + (prefixed ? message.substr(own.size()) : message) + "\n";
}

/// `retnet serve ...` runs retnet-serve from this executable's folder (its own executable, so
/// that the command line needs no HTTP library). Returns only on failure.
int exec_server(char** argv) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string server = (self.parent_path() / "retnet-serve").string();
  argv[1] = const_cast<char*>(server.c_str());
  execv(server.c_str(), argv + 1);
  std::fprintf(stderr,
               "retnet serve: cannot run %s (%s); it is built with the CLI unless "
               "RETNET_BUILD_SERVER=OFF (it needs Boost.Beast: apt-get install libboost-dev)\n",
               server.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(overview().c_str(), stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    std::fputs(overview().c_str(), stdout);
    return 0;
  }
  if (name == "--version" || name == "version") {
    std::printf("retnet %s\n", RETNET_VERSION);
    return 0;
  }
  if (name == "serve") return exec_server(argv);
  const Command* command = nullptr;
  for (const Command& c : kCommands)
    if (name == c.name) command = &c;
  if (!command) {
    std::fprintf(stderr, "retnet: unknown command '%s' (%s)\n", name.c_str(),
                 command_suggestion(name).c_str());
    return 2;
  }
  try {
    return command->main(*command, argc - 2, argv + 2);
  } catch (const retnet::tools::UsageError& e) {
    std::fputs(error_line(name, e.what()).c_str(), stderr);
    return 2;
  } catch (const std::bad_alloc&) {
    std::fputs(error_line(name, "out of memory").c_str(), stderr);
    return 1;
  } catch (const std::exception& e) {  // retnet::Error and the rest
    std::fputs(error_line(name, e.what()).c_str(), stderr);
    return 1;
  }
}
