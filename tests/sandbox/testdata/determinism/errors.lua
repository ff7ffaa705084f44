-- Error messages carry "chunk:line:" and never addresses.
return function(input)
  local results = {}
  local function try(f, ...)
    local ok, err = pcall(f, ...)
    results[#results + 1] = tostring(ok) .. ":" .. tostring(err)
  end
  try(function() local x = nil; return x.field end)
  try(function() return {} < {} end)
  try(function() return #nil end)
  try(function() error("plain") end)
  try(function() error("no position", 0) end)
  try(function() error(setmetatable({}, { __tostring = function() return "obj" end })) end)
  try(function() return ("x"):bad() end)
  try(function() return math.floor("a") end)
  try(function() return string.rep() end)
  try(string.format, "%d", 1.5)
  try(function() local t = setmetatable({}, { __index = function(t, k) error("no " .. k) end }) return t.zz end)
  try(function() return 1 < "2" end)
  try(function() undefined_global() end)
  for _, r in ipairs(results) do print(r) end
  if input.fail then error("failing on purpose: " .. input.fail) end
  return results
end
