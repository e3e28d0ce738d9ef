// The session store of `retnet serve` (tools/serve/local_session_store.hpp) against a folder that
// fails: a save that cannot be written (read-only folder, a file-size limit, the disk quota) leaves
// the session as it was, in memory and on disk, and no temporary file; quotas refuse rather than
// push another session out; a damaged file (any byte changed, truncated, lengthened) is refused
// with a message naming the session, and kept.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <retnet/retnet.hpp>
#include <string>
#include <vector>

#include "serve/local_session_store.hpp"
#include "temp_dir.hpp"

namespace {

using namespace retnet;
using namespace retnet::serve;
namespace fs = std::filesystem;

const std::string kModelDir = std::string(RETNET_SOURCE_DIR) + "/models/shakespeare";

const RetNetModel<float>& model() {
  static const RetNetModel<float> m = load_model<float>(kModelDir);
  return m;
}

/// A session that has read `position + 1` tokens.
Session session_at(int64_t position) {
  State s{model().new_state(1), 7, {1, 2, 3}};
  s.model.positions[0] = position;
  return Session{std::make_shared<const State>(std::move(s))};
}

/// The position the store holds for `id` (acquired and released).
int64_t position_of(SessionStore& store, const std::string& id) {
  Session s;
  EXPECT_EQ(store.acquire(id, s), SessionStore::Result::kOk);
  store.release(id);
  return s.state ? s.state->model.positions[0] : -1;
}

/// Saves `position` into the existing session `id`.
void save(SessionStore& store, const std::string& id, int64_t position) {
  Session s;
  ASSERT_EQ(store.acquire(id, s), SessionStore::Result::kOk);
  store.commit(id, session_at(position));
}

/// The reason of the refusal `f` throws, or a failure when it throws none.
SessionRefused refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const SessionRefused& e) {
    return e;
  }
  ADD_FAILURE() << "no SessionRefused thrown";
  return SessionRefused(SessionRefused::Why::kNotSaved, "");
}

std::vector<std::string> temporary_files(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp") != std::string::npos)
      found.push_back(e.path().string());
  return found;
}

size_t largest_session() {
  return sizeof(Session) + model().new_state(1).size_bytes() + 512 * sizeof(int32_t);
}

TEST(ServeSessionStore, AFailedSaveLeavesTheSessionAsItWas) {
  retnet::testing::TempDir tmp;
  const std::string dir = tmp.file("sessions");
  LocalSessionStore store(model(), 1 << 30, dir);
  std::string id = "a";
  ASSERT_EQ(store.create(id), SessionStore::Result::kOk);
  save(store, id, 41);
  // A folder that cannot be written: chmod stops every user but root, so root gets a file in
  // the folder's place (every write beneath it fails with ENOTDIR).
  const bool root = ::geteuid() == 0;
  if (root) {
    fs::rename(dir, tmp.file("away"));
    std::ofstream(dir) << "not a folder";
  } else {
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  }
  Session s;
  ASSERT_EQ(store.acquire(id, s), SessionStore::Result::kOk);
  const auto e = refusal([&] { store.commit(id, session_at(99)); });
  EXPECT_EQ(e.why(), SessionRefused::Why::kNotSaved);
  EXPECT_NE(std::string(e.what()).find("session 'a' not saved"), std::string::npos) << e.what();
  EXPECT_EQ(position_of(store, id), 41);  // released, and as it was
  std::string other = "b";
  EXPECT_EQ(refusal([&] { store.create(other); }).why(), SessionRefused::Why::kNotSaved);
  EXPECT_FALSE(store.info(other));
  if (root) {
    fs::remove(dir);
    fs::rename(tmp.file("away"), dir);
  } else {
    fs::permissions(dir, fs::perms::owner_all);
  }
  EXPECT_TRUE(temporary_files(dir).empty());
  EXPECT_EQ(LocalSessionStore(model(), 1 << 30, dir).info(id)->tokens, 42);  // the file, too
  save(store, id, 99);
  EXPECT_EQ(LocalSessionStore(model(), 1 << 30, dir).info(id)->tokens, 100);
}

/// In a child process beyond a file-size limit (the server ignores SIGXFSZ, so the write fails
/// with EFBIG as on a full disk): the save is refused as "folder full", the session stays, no
/// temporary file is left. Returns the child's failures ("" when none).
std::string full_folder_child(const std::string& dir) {
  std::signal(SIGXFSZ, SIG_IGN);
  LocalSessionStore store(model(), 1 << 30, dir);
  std::string id = "a";
  if (store.create(id) != SessionStore::Result::kOk) return "create failed";
  const rlimit limit{4096, 4096};
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return "setrlimit failed";
  Session s;
  store.acquire(id, s);
  try {
    store.commit(id, session_at(41));
    return "the save beyond the file-size limit succeeded";
  } catch (const SessionRefused& e) {
    if (e.why() != SessionRefused::Why::kFolderFull)
      return std::string("wrong reason: ") + e.what();
  }
  if (store.info(id)->tokens != 0) return "the session moved although its save failed";
  if (!temporary_files(dir).empty()) return "a temporary file was left: " + temporary_files(dir)[0];
  if (LocalSessionStore(model(), 1 << 30, dir).info(id)->tokens != 0) return "the file changed";
  return "";
}

TEST(ServeSessionStore, AFullFolderIsRefusedAndLeavesNoTemporaryFile) {
  retnet::testing::TempDir tmp;
  model();  // loaded before the fork
  std::fflush(nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string failure = full_folder_child(tmp.file("sessions"));
    if (!failure.empty()) std::fprintf(stderr, "%s\n", failure.c_str());
    std::_Exit(failure.empty() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's line above";
}

TEST(ServeSessionStore, TheDiskQuotaRefusesALargerSaveAndKeepsTheOthers) {
  retnet::testing::TempDir tmp;
  const std::string dir = tmp.file("sessions");
  const uint64_t one_file = [&] {
    LocalSessionStore probe(model(), 1 << 30, tmp.file("probe"));
    std::string id = "p";
    probe.create(id);
    save(probe, id, 1);
    return probe.stats().disk_bytes;
  }();
  LocalSessionStore store(model(), 1 << 30, dir, SessionQuota{100, one_file + one_file / 2});
  std::string a = "a", b = "b";
  ASSERT_EQ(store.create(a), SessionStore::Result::kOk);
  ASSERT_EQ(store.create(b), SessionStore::Result::kOk);
  save(store, a, 41);
  Session s;
  ASSERT_EQ(store.acquire(b, s), SessionStore::Result::kOk);
  const auto e = refusal([&] { store.commit(b, session_at(7)); });
  EXPECT_EQ(e.why(), SessionRefused::Why::kDiskQuota);
  EXPECT_NE(std::string(e.what()).find("--sessions-disk"), std::string::npos) << e.what();
  EXPECT_EQ(position_of(store, a), 41);
  EXPECT_EQ(position_of(store, b), -1);  // still empty
  EXPECT_TRUE(temporary_files(dir).empty());
  save(store, a, 50);  // the same size as before: within the quota
  ASSERT_EQ(store.remove(a), SessionStore::Result::kOk);
  save(store, b, 7);
  EXPECT_EQ(position_of(store, b), 7);
}

TEST(ServeSessionStore, TheSessionCountIsAQuotaOnDiskAndOnRestart) {
  retnet::testing::TempDir tmp;
  const std::string dir = tmp.file("sessions");
  {
    LocalSessionStore store(model(), 0, dir, SessionQuota{2, 1 << 30});  // nothing stays in memory
    std::string a = "a", b = "b", c = "c";
    ASSERT_EQ(store.create(a), SessionStore::Result::kOk);
    ASSERT_EQ(store.create(b), SessionStore::Result::kOk);
    const auto e = refusal([&] { store.create(c); });
    EXPECT_EQ(e.why(), SessionRefused::Why::kTooMany);
    EXPECT_NE(std::string(e.what()).find("--sessions-max 2"), std::string::npos) << e.what();
    EXPECT_TRUE(store.info(a) && store.info(b));
    EXPECT_FALSE(store.info(c));
  }
  LocalSessionStore store(model(), 0, dir, SessionQuota{2, 1 << 30});
  std::string c = "c", a = "a";
  EXPECT_EQ(refusal([&] { store.create(c); }).why(), SessionRefused::Why::kTooMany);
  ASSERT_EQ(store.remove(a), SessionStore::Result::kOk);
  EXPECT_EQ(store.create(c), SessionStore::Result::kOk);
}

TEST(ServeSessionStore, WithoutAFolderNoSessionIsPushedOut) {
  EXPECT_THROW(LocalSessionStore(model(), largest_session() - 1, ""), Error);
  LocalSessionStore store(model(), 2 * largest_session() + largest_session() / 2, "");
  std::string a = "a", b = "b", c = "c";
  ASSERT_EQ(store.create(a), SessionStore::Result::kOk);
  ASSERT_EQ(store.create(b), SessionStore::Result::kOk);
  save(store, a, 10);
  save(store, b, 20);
  const auto e = refusal([&] { store.create(c); });
  EXPECT_EQ(e.why(), SessionRefused::Why::kTooMany);
  EXPECT_NE(std::string(e.what()).find("--sessions-memory"), std::string::npos) << e.what();
  EXPECT_EQ(position_of(store, a), 10);
  EXPECT_EQ(position_of(store, b), 20);
  EXPECT_EQ(store.stats().dropped, 0u);
  ASSERT_EQ(store.remove(a), SessionStore::Result::kOk);
  EXPECT_EQ(store.create(c), SessionStore::Result::kOk);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

/// Every variant of `bytes` given is refused as damaged by a store opened on the folder, and the
/// file stays.
void expect_damaged(const std::string& dir, const std::string& path, const std::string& bytes,
                    const std::string& what) {
  write_bytes(path, bytes);
  LocalSessionStore store(model(), 1 << 30, dir);
  Session s;
  const auto e = refusal([&] { store.acquire("a", s); });
  EXPECT_EQ(e.why(), SessionRefused::Why::kDamaged) << what << ": " << e.what();
  EXPECT_NE(std::string(e.what()).find("session 'a' is damaged"), std::string::npos) << what;
  EXPECT_EQ(refusal([&] { store.info("a"); }).why(), SessionRefused::Why::kDamaged) << what;
  EXPECT_TRUE(fs::exists(path)) << what;
}

TEST(ServeSessionStore, ADamagedFileIsRefusedNamingTheSessionAndKept) {
  retnet::testing::TempDir tmp;
  const std::string dir = tmp.file("sessions"), path = dir + "/a.session";
  for (const bool with_state : {false, true}) {
    {
      LocalSessionStore store(model(), 1 << 30, dir);
      std::string id = "a";
      store.remove(id);
      ASSERT_EQ(store.create(id), SessionStore::Result::kOk);
      if (with_state) save(store, id, 41);
    }
    const std::string good = read_bytes(path);
    std::vector<size_t> places;  // the header byte by byte, then spread, then the end
    for (size_t i = 0; i < good.size(); i += i < 96 ? 1 : good.size() / 48 + 1) places.push_back(i);
    for (size_t i = good.size() > 32 ? good.size() - 32 : 0; i < good.size(); ++i)
      places.push_back(i);
    for (size_t i : places) {
      std::string bad = good;
      bad[i] = char(bad[i] ^ 0x10);
      expect_damaged(dir, path, bad, "byte " + std::to_string(i) + " changed");
    }
    for (size_t n : {size_t(0), size_t(5), size_t(8), good.size() / 2, good.size() - 1})
      if (n < good.size())
        expect_damaged(dir, path, good.substr(0, n), "cut to " + std::to_string(n) + " bytes");
    expect_damaged(dir, path, good + "x", "one byte more");
    write_bytes(path, good);
    LocalSessionStore store(model(), 1 << 30, dir);
    EXPECT_EQ(store.info("a")->tokens, with_state ? 42 : 0);
  }
}

}  // namespace
