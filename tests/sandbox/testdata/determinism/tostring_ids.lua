-- tostring of tables, functions and coroutines prints addresses in stock Lua.
return function(input)
  local a, b = {}, function() end
  local co = coroutine.create(function() end)
  print(tostring(a), tostring(b), tostring(co), tostring(a), tostring(print))
  print(a, b, {}, string.format("%s|%10s", a, {}))
  local ok, err = pcall(function() local x = {} return x .. "s" end)
  print(ok, err)
  local ok2, err2 = pcall(error, {})
  print(ok2, tostring(err2))
  print(tostring(setmetatable({}, { __tostring = function() return "custom" end })))
  print(tostring(setmetatable({}, { __name = "MyType" })))
  return { a = tostring(a), b = tostring(b), co = tostring(co) }
end
