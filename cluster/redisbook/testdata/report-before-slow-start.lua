-- The report script of the release before slow start (commit da56024^),
-- its prelude and body verbatim: TestMixedReleases runs it beside this
-- release's scripts.

local RO = 1e-9 -- thread.roundoff
local PROBE_FLOOR = 5 -- thread.probeFloor
local function F(x) return string.format('%.17g', x) end
local function I(x) return string.format('%d', x) end

local function params()
  return {now = tonumber(ARGV[1]), lease = tonumber(ARGV[2]), node = ARGV[3],
    max = tonumber(ARGV[4]), initial = tonumber(ARGV[5]),
    pk = tonumber(ARGV[6]), pv = tonumber(ARGV[7]), nk = tonumber(ARGV[8]), nv = tonumber(ARGV[9]),
    cohort = tonumber(ARGV[10]), learn = ARGV[11] == '1', probe = tonumber(ARGV[12]), ttl = tonumber(ARGV[13])}
end

-- config.Feedback.Of: kind 0 = value/N, 1 = value/sqrt(N), 2 = value.
local function of(kind, value, c)
  if c < 1 then c = 1 end
  if kind == 0 then return value / c end
  if kind == 1 then return value / math.sqrt(c) end
  return value
end

local fields = {'c', 's', 'f', 'fc', 'ceil', 'str', 'calm', 'clean', 'cat', 'dead'}

local function load(key, p)
  local h = redis.call('HMGET', key, unpack(fields))
  if not h[1] then
    return {c = math.min(p.initial, p.max), s = 0, f = 0, fc = 0, ceil = 0, str = 0, calm = 0, clean = 0, cat = 0, dead = 0}
  end
  local w = {}
  for i, k in ipairs(fields) do w[k] = tonumber(h[i]) end
  return w
end

-- window.Params.Apply
local function apply(w, p)
  w.c = math.min(w.c, p.max)
  if not p.learn then w.ceil, w.str, w.calm, w.clean, w.cat = 0, 0, 0, 0, 0 end
  w.ceil = math.min(w.ceil, p.max)
end

-- The state outlives its last use by an hour (core/destinations.go's
-- learnedFor), a dead destination's at least until its dead-until time.
local function save(key, w, now)
  redis.call('HSET', key, 'c', I(w.c), 's', F(w.s), 'f', F(w.f), 'fc', F(w.fc), 'ceil', I(w.ceil),
    'str', I(w.str), 'calm', I(w.calm), 'clean', I(w.clean), 'cat', I(w.cat), 'dead', I(w.dead))
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
  if p.learn then learn(w, now, nodes) end
  w.fc = w.fc + 1 / w.c
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

-- beat marks this node live for a lease and returns the live nodes.
local function beat(key, p)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', p.now)
  redis.call('ZADD', key, p.now + p.lease, p.node)
  redis.call('PEXPIRE', key, 2 * p.lease)
  return redis.call('ZCARD', key)
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
    I(w.c), F(w.s), F(w.f), F(w.fc), I(w.ceil), I(w.str), I(w.calm), I(w.clean), I(w.cat), I(w.dead), by or ''}
end

local p = params()
local now = p.now
local n = live(KEYS[2], now)
local nn = beat(KEYS[4], p)
local w = load(KEYS[1], p)
apply(w, p)
local from, died = w.c, 0
if ARGV[14] == '1' then
  if failed(w, p, now, nn) then
    w.dead = tonumber(ARGV[15])
    died = 1
  end
else
  succeeded(w, p, n, now)
  if from == 0 then w.dead = 0 end
end
save(KEYS[1], w, now)
notify(KEYS[3], n, w.c, now, ARGV[16], ARGV[17], died == 1)
return reply('changed', 0, 0, from, died, n, nn, w, bynode(KEYS[2]))
