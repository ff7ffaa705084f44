-- Pattern classes are ASCII only (stock uses the locale's <ctype.h>).
return function(input)
  local s = "Grüße, Müller! 1.234,50 EUR; INV-2024-0001 and inv-2023-0002 \xe9t\xe9"
  local words = {}
  for w in s:gmatch("%a+") do words[#words + 1] = w end
  print(table.concat(words, "|"))
  print(s:gsub("%s+", "_"))
  print(s:find("(%d+)%.(%d+),(%d+)"))
  print(s:match("INV%-(%d%d%d%d)%-(%d+)"))
  print(("key = value"):match("^(%w+)%s*=%s*(%w+)$"))
  print(("THE (quick) fox"):find("%((%a+)%)"))
  print(("hello world from Lua"):gsub("(%w+) (%w+)", "%2 %1"))
  print(("abc"):gsub("", "-"))
  print(("f(a(b)c)d"):match("%b()"), ("THE END"):find("%f[%a]%a+", 2))
  print(string.gsub("hello world", "%w+", { hello = "HI", world = false }))
  print(string.gsub("abc", "%w", function(c) return c:byte() end))
  local punct = 0
  for i = 0, 255 do if string.char(i):match("%p") then punct = punct + 1 end end
  local alpha = 0
  for i = 0, 255 do if string.char(i):match("%a") then alpha = alpha + 1 end end
  print(punct, alpha)
  return { words = #words }
end
