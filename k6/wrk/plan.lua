-- wrk script for GET/PUT …/plan over many sessions.
-- SESSIONS: comma-separated session ids; MODE: get | put | put-keyed | projection.
-- PUT toggles each session's root agent, so most requests commit a plan/mode; put-keyed does
-- the same with a fresh Idempotency-Key on every request (the cost of idempotent writes);
-- projection GETs the session's plan projection (…/projections/plan, every agent's view).
local sessions = {}
for sid in string.gmatch(os.getenv("SESSIONS") or "", "[^,]+") do
  sessions[#sessions + 1] = sid
end
local mode = os.getenv("MODE") or "get"
-- AUTH: a credential (API key or token) sent as a bearer header on every request.
local auth = os.getenv("AUTH")
local headers = {}
if auth and auth ~= "" then headers["Authorization"] = "Bearer " .. auth end
local counter = 0
local toggles = {}

local thread_key = ""
local threads = 0

-- Runs in the main state, once per thread: numbers them, so their keys never meet.
function setup(thread)
  threads = threads + 1
  thread:set("thread_no", threads)
end

function init(args)
  -- Offset threads so they do not walk the same sessions in lock step.
  counter = math.random(1, #sessions)
  thread_key = string.format("%x-%d", os.time(), thread_no or 0)
end

function request()
  counter = counter + 1
  local i = (counter % #sessions) + 1
  if mode == "projection" then
    return wrk.format("GET", "/v1/sessions/" .. sessions[i] .. "/projections/plan", headers)
  end
  local path = "/v1/sessions/" .. sessions[i] .. "/agents/main/plan"
  if mode == "put" or mode == "put-keyed" then
    toggles[i] = not toggles[i]
    local body = toggles[i] and '{"active":true}' or '{"active":false}'
    local h = { ["Content-Type"] = "application/json" }
    for k, v in pairs(headers) do h[k] = v end
    if mode == "put-keyed" then h["Idempotency-Key"] = thread_key .. "-" .. counter end
    return wrk.format("PUT", path, h, body)
  end
  return wrk.format("GET", path, headers)
end

-- No `response` callback: wrk would build a Lua table of every response's headers for it (the
-- more headers a server sends, the more of wrk's CPU per request, taken from the server under
-- test on a shared machine); wrk counts non-2xx/3xx answers itself.
function done(summary, latency, requests)
  io.write(string.format("non-2xx/3xx: %d  p50 %.2f ms  p99 %.2f ms\n",
    summary.errors.status, latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
