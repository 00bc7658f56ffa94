-- Pop up to ARGV[1] due ids of one lane, highest priority first, then earliest due.
-- KEYS[1] the lane's sorted set, KEYS[2] its meta hash (one hash slot).
-- ARGV[1] how many (capped at 1000: the script's work is bounded),
-- ARGV[2] the Postgres system identifier the caller's database has,
-- ARGV[3..] pairs of score bounds (min, max), one pair per priority band, highest first.
-- Returns {status, id...}: status 1 popped; 0 no mirror (flushed, restarted, never built);
-- -1 the mirror was built from another database. Only status 1 carries ids.
local meta = redis.call('HMGET', KEYS[2], 'epoch', 'system_id')
if not meta[1] then
    return {0}
end
if meta[2] ~= ARGV[2] then
    return {-1}
end
local want = math.min(tonumber(ARGV[1]), 1000)
local out = {1}
local got = 0
for i = 3, #ARGV, 2 do
    if got >= want then
        break
    end
    local ids = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[i], ARGV[i + 1], 'LIMIT', 0, want - got)
    if #ids > 0 then
        redis.call('ZREM', KEYS[1], unpack(ids))
        for _, id in ipairs(ids) do
            out[#out + 1] = id
        end
        got = got + #ids
    end
end
return out
