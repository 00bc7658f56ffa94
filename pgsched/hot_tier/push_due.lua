-- Add ids just committed to a lane's mirror, only while the sweep leader keeps one: a lane
-- with no meta (flushed, restarted, never built, or not served) or a mirror of another
-- database is left alone, and the leader's next pass finds the ids in Postgres.
-- KEYS[1] the lane's sorted set, KEYS[2] its meta hash (one hash slot).
-- ARGV[1] the Postgres system identifier of the caller's database,
-- ARGV[2] the lane's wake-up channel, or '' for none (nothing of it due yet),
-- ARGV[3..] pairs of score and id (at most 1000 pairs a call).
-- Returns how many ids were new to the set; -1 no mirror; -2 a mirror of another database.
local meta = redis.call('HMGET', KEYS[2], 'epoch', 'system_id')
if not meta[1] then
    return -1
end
if meta[2] ~= ARGV[1] then
    return -2
end
local added = redis.call('ZADD', KEYS[1], unpack(ARGV, 3))
if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], (#ARGV - 2) / 2)
end
return added
