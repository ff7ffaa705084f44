-- Summary of a web server's access log in the combined log format (Apache, nginx):
--   203.0.113.7 - alice [10/Oct/2024:13:55:36 +0000] "GET /docs/index.html?lang=en HTTP/1.1" 200 2326 "https://example.com/" "Mozilla/5.0"
--
-- Input:  { lines = { "<log line>", ... }, top = <how many paths to list, default 10> }
-- Output: { requests = n, unparsed = n, status = { ["200"] = n, ... },
--           status_classes = { ["2xx"] = n, ... }, bytes_total = n,
--           bytes_per_client = { ["203.0.113.7"] = n, ... },
--           top_paths = { { path = "/docs/:id", requests = n, bytes = n }, ... } }
--
-- Paths are grouped after normalization (no query string, numeric and hex ids folded), so
-- /orders/17?x=1 and /orders/42 count as one path. Ties in top_paths are broken by path.
local bp = rote.blueprint { name = "access_log", version = "1.0.0" }

local log_line = bp:regex {
  name = "log_line",
  task = "Match one line of the combined log format and capture, as named groups, client "
      .. "(remote address), method, path (the request target), status (three digits) and bytes "
      .. "(a number, or '-' when none were sent). The whole line must match.",
  examples = {
    { [[203.0.113.7 - - [10/Oct/2024:13:55:36 +0000] "GET /index.html HTTP/1.1" 200 2326 "-" "curl/8.0"]],
      { [[203.0.113.7 - - [10/Oct/2024:13:55:36 +0000] "GET /index.html HTTP/1.1" 200 2326 "-" "curl/8.0"]] } },
    { [[2001:db8::1 - bob [10/Oct/2024:13:55:37 +0000] "POST /api/orders?id=7 HTTP/2.0" 201 - "https://shop.example/" "Mozilla/5.0 (X11)"]],
      { [[2001:db8::1 - bob [10/Oct/2024:13:55:37 +0000] "POST /api/orders?id=7 HTTP/2.0" 201 - "https://shop.example/" "Mozilla/5.0 (X11)"]] } },
    { "this is not a log line", {} },
  },
}

local normalize_path = bp:lua {
  name = "normalize_path",
  task = "Normalize a request path for grouping: drop the query string and fragment, collapse "
      .. "repeated slashes, drop a trailing slash (except for '/'), and replace every path segment "
      .. "that is all digits, or a hexadecimal id of 8 or more characters, with ':id'.",
  signature = "function(path) -> string",
  tests = {
    { "/index.html", "/index.html" },
    { "/api/orders/12345?expand=items#top", "/api/orders/:id" },
    { "//static///css/site.css", "/static/css/site.css" },
    { "/users/42/avatar/", "/users/:id/avatar" },
    { "/blobs/9f86d081884c7d65", "/blobs/:id" },
    { "/", "/" },
  },
}

function bp.run(input)
  local lines = input.lines or {}
  local top = input.top or 10
  local matches = log_line:match_each(lines)

  local status, classes, bytes_per_client = {}, {}, {}
  local requests, unparsed, bytes_total = 0, 0, 0
  local raw_paths, unique = {}, {}
  local parsed = {}
  for i, m in ipairs(matches) do
    if not m then
      unparsed = unparsed + 1
    else
      local g = m.named
      local bytes = g.bytes == "-" and 0 or math.tointeger(tonumber(g.bytes))
      requests = requests + 1
      status[g.status] = (status[g.status] or 0) + 1
      local class = string.sub(g.status, 1, 1) .. "xx"
      classes[class] = (classes[class] or 0) + 1
      bytes_per_client[g.client] = (bytes_per_client[g.client] or 0) + bytes
      bytes_total = bytes_total + bytes
      if not unique[g.path] then
        unique[g.path] = true
        raw_paths[#raw_paths + 1] = g.path
      end
      parsed[#parsed + 1] = { path = g.path, bytes = bytes }
    end
  end

  -- Each distinct raw path is normalized once, in one batch.
  local normalized = {}
  if #raw_paths > 0 then
    for i, p in ipairs(normalize_path:map(raw_paths)) do normalized[raw_paths[i]] = p end
  end
  local per_path = {}
  for _, r in ipairs(parsed) do
    local key = normalized[r.path]
    local entry = per_path[key]
    if not entry then
      entry = { path = key, requests = 0, bytes = 0 }
      per_path[key] = entry
    end
    entry.requests = entry.requests + 1
    entry.bytes = entry.bytes + r.bytes
  end
  local ranked = {}
  for _, entry in pairs(per_path) do ranked[#ranked + 1] = entry end
  table.sort(ranked, function(a, b)
    if a.requests ~= b.requests then return a.requests > b.requests end
    return a.path < b.path
  end)
  local top_paths = {}
  for i = 1, math.min(top, #ranked) do top_paths[i] = ranked[i] end

  rote.log(requests, "requests,", unparsed, "unparsed,", #ranked, "distinct paths")
  return {
    requests = requests,
    unparsed = unparsed,
    status = status,
    status_classes = classes,
    bytes_total = bytes_total,
    bytes_per_client = bytes_per_client,
    top_paths = top_paths,
  }
end

return bp
