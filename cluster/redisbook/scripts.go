package redisbook

import "github.com/redis/go-redis/v9"

// The scripts run each request atomically in Redis. prelude is
// thread.Window (Succeeded, Failed, learn, expire, Revive) and
// window.Params.Apply, line for line in Lua 5.1, whose numbers are IEEE
// doubles like Go's float64: the same operations in the same order give
// the same bits (a test drives both with the same sequences and compares
// every field). Floats are stored and returned with %.17g, which reads
// back exactly; Lua's tostring (%.14g) would not, and a number returned
// to Redis as such is truncated to an integer.
//
// Every script that takes a destination's settings reads them from ARGV
// 1–14 (see args); times are the asking node's, in milliseconds since the
// epoch (DESIGN §13 on clock skew).
const prelude = `
local RO = 1e-9 -- thread.roundoff
local PROBE_FLOOR = 5 -- thread.probeFloor
local function F(x) return string.format('%.17g', x) end
local function I(x) return string.format('%d', x) end

local function params()
  return {now = tonumber(ARGV[1]), lease = tonumber(ARGV[2]), node = ARGV[3],
    max = tonumber(ARGV[4]), initial = tonumber(ARGV[5]),
    pk = tonumber(ARGV[6]), pv = tonumber(ARGV[7]), nk = tonumber(ARGV[8]), nv = tonumber(ARGV[9]),
    cohort = tonumber(ARGV[10]), learn = ARGV[11] == '1', probe = tonumber(ARGV[12]), ttl = tonumber(ARGV[13]),
    slow = ARGV[14] == '1'}
end

-- config.Feedback.Of: kind 0 = value/N, 1 = value/sqrt(N), 2 = value.
local function of(kind, value, c)
  if c < 1 then c = 1 end
  if kind == 0 then return value / c end
  if kind == 1 then return value / math.sqrt(c) end
  return value
end

local fields = {'c', 's', 'f', 'fc', 'ceil', 'str', 'calm', 'clean', 'cat', 'dead', 'st'}

-- thread.Window.Start
local function start(w, p)
  w.c = math.min(p.initial, p.max)
  w.st = 0
  if p.slow and w.c > 1 then w.c, w.st = 1, 1 end
end

local function load(key, p)
  local h = redis.call('HMGET', key, unpack(fields))
  if not h[1] then
    local w = {s = 0, f = 0, fc = 0, ceil = 0, str = 0, calm = 0, clean = 0, cat = 0, dead = 0}
    start(w, p)
    return w
  end
  local w = {}
  for i, k in ipairs(fields) do w[k] = tonumber(h[i]) end
  w.st = w.st or 0 -- a state written before slow start
  return w
end

-- window.Params.Apply
local function apply(w, p)
  w.c = math.min(w.c, p.max)
  if not p.slow then w.st = 0 end
  if not p.learn then w.ceil, w.str, w.calm, w.clean, w.cat = 0, 0, 0, 0, 0 end
  w.ceil = math.min(w.ceil, p.max)
end

-- The state outlives its last use by an hour (core/destinations.go's
-- learnedFor), a dead destination's at least until its dead-until time.
local function save(key, w, now)
  redis.call('HSET', key, 'c', I(w.c), 's', F(w.s), 'f', F(w.f), 'fc', F(w.fc), 'ceil', I(w.ceil),
    'str', I(w.str), 'calm', I(w.calm), 'clean', I(w.clean), 'cat', I(w.cat), 'dead', I(w.dead),
    'st', I(w.st))
  redis.call('PEXPIRE', key, math.max(3600000, w.dead - now + 3600000))
end

local function expire(w, p, now)
  if w.ceil > 0 and p.ttl > 0 and now - w.cat > p.ttl then
    w.ceil, w.str, w.calm, w.clean, w.cat = 0, 0, 0, 0, 0
  end
end

local function revive(w, p, busy)
  if w.c ~= 0 then return end
  w.c = math.min(p.initial, p.max)
  if busy > 0 then w.c = math.min(busy, p.max) end
  w.s, w.f, w.fc = 0, 0, 0
end

local function succeeded(w, p, busy, now)
  w.fc = 0
  if w.c == 0 then revive(w, p, busy) return end
  if w.st == 1 then
    w.s = w.s + 1 / w.c
    if w.s >= 1 - RO then
      w.c = w.c + 1
      w.s = 0
    end
    if w.c >= math.min(p.initial, p.max) then w.c, w.st, w.s = math.min(p.initial, p.max), 0, 0 end
    return
  end
  expire(w, p, now)
  if w.ceil > 0 then w.calm = w.calm + 1 end
  if w.ceil > 0 and w.c > w.ceil then
    w.clean = w.clean + 1
    if w.clean >= w.c then w.ceil, w.str, w.clean, w.cat = w.c, 0, 0, now end
  end
  if w.c >= p.max or w.c >= busy + p.initial then return end
  local g = of(p.pk, p.pv, w.c)
  if w.ceil > 0 and w.str >= 2 and w.c >= w.ceil then g = math.min(g / p.probe, 1 / (p.probe * PROBE_FLOOR)) end
  w.s = w.s + g
  while w.s >= 1 - RO do
    w.c = w.c + 1
    w.f = 0
    w.s = w.s - 1
  end
  if w.s < 0 then w.s = 0 end
  w.c = math.min(w.c, p.max)
end

local function learn(w, now, nodes)
  local at = w.c
  local prompt = w.clean <= 2 * math.max(nodes, 1)
  local settled = w.calm - w.clean >= w.ceil
  if w.ceil == 0 or at > w.ceil + 1 then
    w.ceil, w.str, w.cat = math.max(at - 1, 1), 1, now
  elseif at == w.ceil + 1 and prompt and settled then
    w.str = math.min(w.str + 1, 2)
    w.cat = now
  elseif at == w.ceil + 1 then
    w.str = math.min(w.str, 1)
  elseif w.str >= 2 then
    w.str = w.str - 1
  else
    w.ceil, w.str, w.cat = math.max(at - 1, 1), 1, now
  end
  w.clean, w.calm = 0, 0
end

local function failed(w, p, now, nodes)
  if w.c == 0 then return false end
  expire(w, p, now)
  local cohort = w.c
  if w.st == 1 then
    cohort = math.min(p.initial, p.max)
    if w.c == 1 then
      w.fc = w.fc + 1 / cohort
      if p.cohort > 0 and w.fc >= p.cohort - RO then
        w.c, w.st, w.s = 0, 0, 0
        return true
      end
      return false
    end
    w.st, w.s = 0, 0
  elseif p.learn then
    learn(w, now, nodes)
  end
  w.fc = w.fc + 1 / cohort
  if p.cohort > 0 and w.fc >= p.cohort - RO then
    w.c = 0
    return true
  end
  w.f = w.f - of(p.nk, p.nv, w.c)
  while w.f < -RO do
    w.c = w.c - 1
    w.f = w.f + 1
    w.s = 0
  end
  if w.f < 0 then w.f = 0 end
  w.c = math.max(w.c, 1)
  return false
end

-- The live leases: a lease scored at or before now has expired.
local function live(leases, now)
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
  return redis.call('ZCARD', leases)
end

-- beat marks this node live for a lease, among the nodes and among those
-- that know the slow start, and returns the live nodes.
local function beat(key, slowkey, p)
  for _, k in ipairs({key, slowkey}) do
    redis.call('ZREMRANGEBYSCORE', k, '-inf', p.now)
    redis.call('ZADD', k, p.now + p.lease, p.node)
    redis.call('PEXPIRE', k, 2 * p.lease)
  end
  return redis.call('ZCARD', key)
end

-- mixed reports whether a node of a release before the slow start is
-- live (one among the nodes but not among those that know the slow start,
-- after beat pruned both). Such a node neither writes nor reads the state
-- field st, and takes a window at one session in slow start for one that
-- feedback governs, where one failure is a whole pseudo-cohort (dead at
-- the default failed_cohort_limit). While one is live every node computes
-- as the older one does, with slow_start = false (new windows open at the
-- initial window), and unslow ends a slow start under way where the older
-- release opens every window.
local function mixed(p, key, slowkey)
  if p.slow and redis.call('ZCARD', key) > redis.call('ZCARD', slowkey) then
    p.slow = false
    return true
  end
  return false
end

-- unslow ends a slow start under way at the initial window.
local function unslow(w, p)
  if w.st == 1 then w.c, w.st, w.s = math.max(w.c, math.min(p.initial, p.max)), 0, 0 end
end

-- notify publishes a Free to every node denied on the destination when a
-- session is free or the destination just died, and forgets them.
local function notify(waiting, n, c, now, channel, dest, died)
  if not died and (c <= 0 or n >= c) then return end
  local ws = redis.call('ZRANGEBYSCORE', waiting, '(' .. now, '+inf')
  redis.call('DEL', waiting)
  for _, node in ipairs(ws) do redis.call('PUBLISH', channel .. node, dest) end
end

-- bynode counts the live leases node by node (a member is
-- node:incarnation:n, and a node's name holds no ':' or white space):
-- "name count name count", names in order, for operators.
local function bynode(leases)
  local count, names = {}, {}
  for _, m in ipairs(redis.call('ZRANGE', leases, 0, -1)) do
    local node = string.match(m, '^[^:]*')
    if not count[node] then
      count[node] = 0
      names[#names + 1] = node
    end
    count[node] = count[node] + 1
  end
  table.sort(names)
  local out = {}
  for _, node in ipairs(names) do
    out[#out + 1] = node .. ' ' .. I(count[node])
  end
  return table.concat(out, ' ')
end

local function reply(kind, retry, revived, from, died, n, nn, w, by)
  return {kind, I(retry), I(revived), I(from), I(died), I(n), I(nn),
    I(w.c), F(w.s), F(w.f), F(w.fc), I(w.ceil), I(w.str), I(w.calm), I(w.clean), I(w.cat), I(w.dead), by or '', I(w.st)}
end
`

// acquire: KEYS state, leases, waiting, nodes, slow-start nodes; ARGV
// 1–14 settings, 15 the lease's member, 16 the Free channel prefix, 17 the
// destination.
// window.Board's Acquire: a dead destination whose time has come revives
// to the live sessions or its initial window; a session is granted while
// the live leases are below the window; a denied node waits for a Free
// (or the first lease's expiry, or the dead-until time).
var acquire = redis.NewScript(prelude + `
local p = params()
local now = p.now
local n = live(KEYS[2], now)
local nn = beat(KEYS[4], KEYS[5], p)
local older = mixed(p, KEYS[4], KEYS[5])
local w = load(KEYS[1], p)
if older then unslow(w, p) end
apply(w, p)
local revived = 0
if w.c == 0 and now >= w.dead then
  revive(w, p, n)
  w.dead = 0
  revived = 1
end
local kind, retry = 'granted', 0
if w.c == 0 then
  kind, retry = 'dead', w.dead
elseif n < w.c then
  redis.call('ZADD', KEYS[2], now + p.lease, ARGV[15])
  redis.call('PEXPIRE', KEYS[2], 2 * p.lease)
  n = n + 1
else
  kind = 'full'
  retry = tonumber(redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2])
  redis.call('ZADD', KEYS[3], now + p.lease, p.node)
  redis.call('PEXPIRE', KEYS[3], 2 * p.lease)
end
if kind == 'dead' then
  redis.call('ZADD', KEYS[3], math.max(w.dead, now + p.lease), p.node)
  redis.call('PEXPIRE', KEYS[3], math.max(w.dead, now + p.lease) - now + p.lease)
end
save(KEYS[1], w, now)
notify(KEYS[3], n, w.c, now, ARGV[16], ARGV[17], false)
return reply(kind, retry, revived, w.c, 0, n, nn, w, bynode(KEYS[2]))
`)

// release: KEYS state, leases, waiting; ARGV now, the lease's member, the
// Free channel prefix, the destination. It returns the live leases.
var release = redis.NewScript(prelude + `
local now = tonumber(ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[2])
local n = live(KEYS[2], now)
local c = redis.call('HGET', KEYS[1], 'c')
if c then notify(KEYS[3], n, tonumber(c), now, ARGV[3], ARGV[4], false) end
return n
`)

// report: KEYS state, leases, waiting, nodes, slow-start nodes; ARGV 1–14
// settings, 15 "1" for a site failure, 16 its dead-until time, 17 the Free
// channel prefix, 18 the destination. window.Record.Judge with the live leases as busy
// and the live nodes as nodes.
var report = redis.NewScript(prelude + `
local p = params()
local now = p.now
local n = live(KEYS[2], now)
local nn = beat(KEYS[4], KEYS[5], p)
local older = mixed(p, KEYS[4], KEYS[5])
local w = load(KEYS[1], p)
if older then unslow(w, p) end
apply(w, p)
local from, died = w.c, 0
if ARGV[15] == '1' then
  if failed(w, p, now, nn) then
    w.dead = tonumber(ARGV[16])
    died = 1
  end
else
  succeeded(w, p, n, now)
  if from == 0 then w.dead = 0 end
end
save(KEYS[1], w, now)
notify(KEYS[3], n, w.c, now, ARGV[17], ARGV[18], died == 1)
return reply('changed', 0, 0, from, died, n, nn, w, bynode(KEYS[2]))
`)

// seed: KEYS state; ARGV now, then c s f fc ceil str cat dead st. A node
// coming back from fallback writes the last shared state it saw where the
// store has none (a Redis restarted without persistence); the first node
// back wins, the store's own state is never overwritten. Returns 1 if it
// wrote.
var seed = redis.NewScript(prelude + `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local now = tonumber(ARGV[1])
local w = {c = tonumber(ARGV[2]), s = tonumber(ARGV[3]), f = tonumber(ARGV[4]), fc = tonumber(ARGV[5]),
  ceil = tonumber(ARGV[6]), str = tonumber(ARGV[7]), calm = 0, clean = 0, cat = tonumber(ARGV[8]), dead = tonumber(ARGV[9]),
  st = tonumber(ARGV[10])}
save(KEYS[1], w, now)
return 1
`)

var scripts = []*redis.Script{acquire, release, report, seed}
