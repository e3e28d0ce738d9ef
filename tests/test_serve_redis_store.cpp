// The session store shared by replicas (tools/serve/redis_session_store.hpp) against a real
// redis-server: two stores over one Redis are two replicas. A session created on one continues on
// the other; a session held by one is busy to the other; a replica that dies without releasing
// lets go when its lease expires, and its late commit is refused; Redis stopped is a 503-class
// refusal (never "not found"), and Redis restarted from its append-only file keeps the sessions.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <retnet/retnet.hpp>
#include <string>
#include <thread>

#include "redis_server.hpp"
#include "serve/redis_session_store.hpp"
#include "temp_dir.hpp"

namespace {

using namespace retnet;
using namespace retnet::serve;
using retnet::testing::RedisServer;
using retnet::testing::TempDir;

const std::string kModelDir = std::string(RETNET_SOURCE_DIR) + "/models/shakespeare";

const RetNetModel<float>& model() {
  static const RetNetModel<float> m = load_model<float>(kModelDir);
  return m;
}

/// A session that has read `position + 1` tokens, its state filled with a pattern of `position`.
Session session_at(int64_t position) {
  State s{model().new_state(1), 7, {1, 2, 3}};
  s.model.positions[0] = position;
  for (auto& layer : s.model.layers) layer.setConstant(static_cast<float>(position) * 0.25f);
  return Session{std::make_shared<const State>(std::move(s))};
}

int64_t position_of(SessionStore& store, const std::string& id) {
  Session s;
  EXPECT_EQ(store.acquire(id, s), SessionStore::Result::kOk);
  store.release(id);
  return s.state ? s.state->model.positions[0] : -1;
}

SessionRefused::Why refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const SessionRefused& e) {
    return e.why();
  }
  ADD_FAILURE() << "no SessionRefused thrown";
  return SessionRefused::Why::kNotSaved;
}

RedisStoreOptions short_lease() {
  RedisStoreOptions o;
  o.lease = std::chrono::milliseconds(600);
  return o;
}

TEST(RedisSessionStore, ASessionMovesBetweenReplicasWithItsExactState) {
  TempDir dir;
  RedisServer redis(dir.str());
  RedisSessionStore a(model(), RedisAddress::parse(redis.url()));
  RedisSessionStore b(model(), RedisAddress::parse(redis.url()));
  std::string id = "talk";
  ASSERT_EQ(a.create(id), SessionStore::Result::kOk);
  EXPECT_EQ(b.create(id), SessionStore::Result::kExists);
  Session s;
  ASSERT_EQ(b.acquire(id, s), SessionStore::Result::kOk);
  EXPECT_FALSE(s.state);  // created empty
  b.commit(id, session_at(41));
  ASSERT_EQ(a.acquire(id, s), SessionStore::Result::kOk);
  ASSERT_TRUE(s.state);
  const Session kept = session_at(41);
  const State& want = *kept.state;
  EXPECT_EQ(s.state->model.positions[0], 41);
  EXPECT_EQ(s.state->recent, want.recent);
  for (size_t l = 0; l < want.model.layers.size(); ++l) {
    const auto& got = s.state->model.layers[l];
    ASSERT_EQ(got.size(), want.model.layers[l].size());
    EXPECT_TRUE(std::equal(got.data(), got.data() + got.size(), want.model.layers[l].data()))
        << "layer " << l;
  }
  a.commit(id, session_at(50));
  EXPECT_EQ(position_of(b, id), 50);  // b's cached copy (version 2) is not used for version 3
  EXPECT_EQ(b.info(id)->tokens, 51);
  EXPECT_EQ(a.remove(id), SessionStore::Result::kOk);
  EXPECT_EQ(b.acquire(id, s), SessionStore::Result::kNotFound);
}

TEST(RedisSessionStore, AHeldSessionIsBusyOnEveryReplica) {
  TempDir dir;
  RedisServer redis(dir.str());
  RedisSessionStore a(model(), RedisAddress::parse(redis.url()), short_lease());
  RedisSessionStore b(model(), RedisAddress::parse(redis.url()), short_lease());
  std::string id = "x";
  ASSERT_EQ(a.create(id), SessionStore::Result::kOk);
  Session s;
  ASSERT_EQ(a.acquire(id, s), SessionStore::Result::kOk);
  EXPECT_EQ(a.acquire(id, s), SessionStore::Result::kBusy);
  EXPECT_EQ(b.acquire(id, s), SessionStore::Result::kBusy);
  EXPECT_EQ(b.remove(id), SessionStore::Result::kBusy);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // renewed: still held
  EXPECT_EQ(b.acquire(id, s), SessionStore::Result::kBusy);
  a.commit(id, session_at(9));
  ASSERT_EQ(b.acquire(id, s), SessionStore::Result::kOk);
  b.release(id);
  EXPECT_EQ(position_of(a, id), 9);
}

TEST(RedisSessionStore, ADeadReplicasLeaseExpiresAndItsLateCommitIsRefused) {
  TempDir dir;
  RedisServer redis(dir.str());
  RedisSessionStore b(model(), RedisAddress::parse(redis.url()), short_lease());
  std::string id = "y";
  ASSERT_EQ(b.create(id), SessionStore::Result::kOk);
  auto dying =
      std::make_unique<RedisSessionStore>(model(), RedisAddress::parse(redis.url()), short_lease());
  Session s;
  ASSERT_EQ(dying->acquire(id, s), SessionStore::Result::kOk);
  dying.reset();  // a process that stops renewing (its lease is not released)
  EXPECT_EQ(b.acquire(id, s), SessionStore::Result::kBusy);
  std::this_thread::sleep_for(std::chrono::milliseconds(900));
  ASSERT_EQ(b.acquire(id, s), SessionStore::Result::kOk);
  b.commit(id, session_at(3));
  EXPECT_EQ(position_of(b, id), 3);
}

TEST(RedisSessionStore, RedisAwayIsUnavailableAndRedisRestartedKeepsTheSessions) {
  TempDir dir;
  RedisServer redis(dir.str());
  RedisSessionStore a(model(), RedisAddress::parse(redis.url()));
  std::string id = "z";
  ASSERT_EQ(a.create(id), SessionStore::Result::kOk);
  Session s;
  ASSERT_EQ(a.acquire(id, s), SessionStore::Result::kOk);
  a.commit(id, session_at(12));
  redis.stop();
  EXPECT_EQ(refusal([&] { a.acquire(id, s); }), SessionRefused::Why::kUnavailable);
  std::string other = "w";
  EXPECT_EQ(refusal([&] { a.create(other); }), SessionRefused::Why::kUnavailable);
  EXPECT_EQ(refusal([&] { a.info(id); }), SessionRefused::Why::kUnavailable);
  redis.start();                                                       // from its append-only file
  RedisSessionStore fresh(model(), RedisAddress::parse(redis.url()));  // no cache
  EXPECT_EQ(position_of(fresh, id), 12);
  EXPECT_EQ(position_of(a, id), 12);  // the old connections are replaced
}

TEST(RedisSessionStore, AddressesAreCheckedAndTheQuotaHoldsAcrossReplicas) {
  EXPECT_THROW(RedisAddress::parse("http://x:1"), InvalidArgument);
  EXPECT_THROW(RedisAddress::parse("redis://:1"), InvalidArgument);
  EXPECT_THROW(RedisAddress::parse("redis://h:99999"), InvalidArgument);
  EXPECT_THROW(RedisAddress::parse("redis://h:1/x"), InvalidArgument);
  const RedisAddress a = RedisAddress::parse("redis://example:7000/3");
  EXPECT_EQ(a.host, "example");
  EXPECT_EQ(a.port, 7000);
  EXPECT_EQ(a.db, 3);
  EXPECT_EQ(RedisAddress::parse("redis://h").port, 6379);

  TempDir dir;
  RedisServer redis(dir.str());
  RedisStoreOptions two;
  two.max_sessions = 2;
  RedisSessionStore r1(model(), RedisAddress::parse(redis.url()), two);
  RedisSessionStore r2(model(), RedisAddress::parse(redis.url()), two);
  std::string p, q, r;
  ASSERT_EQ(r1.create(p), SessionStore::Result::kOk);
  ASSERT_EQ(r2.create(q), SessionStore::Result::kOk);
  EXPECT_NE(p, q);
  EXPECT_EQ(refusal([&] { r1.create(r); }), SessionRefused::Why::kTooMany);
  EXPECT_EQ(r2.remove(p), SessionStore::Result::kOk);
  r.clear();
  EXPECT_EQ(r1.create(r), SessionStore::Result::kOk);
}

}  // namespace

namespace {

// --session-ttl: a session unused for the TTL is gone (404), on every replica; one used within
// it lives on, since each commit starts the TTL again; and it no longer counts for the quota.
TEST(RedisSessionStore, SessionsExpireAfterTheirTimeToLive) {
  TempDir dir;
  RedisServer redis(dir.str());
  RedisStoreOptions o;
  o.ttl = std::chrono::seconds(2);
  o.max_sessions = 1;
  RedisSessionStore a(model(), RedisAddress::parse(redis.url()), o);
  RedisSessionStore b(model(), RedisAddress::parse(redis.url()), o);
  std::string id = "brief";
  ASSERT_EQ(a.create(id), SessionStore::Result::kOk);
  Session s;
  for (int i = 0; i < 3; ++i) {  // used every second: kept
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    ASSERT_EQ(a.acquire(id, s), SessionStore::Result::kOk) << "use " << i;
    a.commit(id, session_at(i));
  }
  EXPECT_EQ(position_of(b, id), 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(2600));
  EXPECT_EQ(b.acquire(id, s), SessionStore::Result::kNotFound);
  EXPECT_FALSE(a.info(id).has_value());
  std::string next;
  EXPECT_EQ(b.create(next), SessionStore::Result::kOk);  // the expired one left the quota
}

}  // namespace
