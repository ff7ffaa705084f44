-- Contact list normalization from CSV: phone numbers to E.164, dates to ISO 8601, names trimmed
-- and cased.
--
-- Input:  { csv = "name,phone,birthday,country\n...", default_country = "US" }
--         The header names the columns (any order; country is optional per row and falls back
--         to default_country). Fields may be quoted with "..." ("" is a quote inside).
-- Output: { contacts = { { name, phone, birthday, row }, ... }, rejected = { { row, reason }, ... },
--           counts = { rows = n, ok = n, rejected = n } }
--         A row is rejected when its phone number or birthday cannot be normalized; the reason
--         names the field and the original text.
local bp = rote.blueprint { name = "contacts", version = "1.0.0" }

local normalize_name = bp:lua {
  name = "normalize_name",
  task = "Normalize a person's name: trim, collapse runs of whitespace to one space, and write "
      .. "each word with an upper-case first letter and lower-case rest, also after '-' and after "
      .. "an apostrophe that follows a single letter (O'Brien). Keep non-ASCII letters as they are.",
  signature = "function(name) -> string",
  tests = {
    { "  ada   LOVELACE ", "Ada Lovelace" },
    { "jean-luc picard", "Jean-Luc Picard" },
    { "o'brien", "O'Brien" },
    { "Zoë\tsaldaña", "Zoë Saldaña" },
  },
}

local normalize_phone = bp:lua {
  name = "normalize_phone",
  task = "Normalize a phone number to E.164 (+ and up to 15 digits). Input: { number = text, "
      .. "country = ISO 3166 alpha-2 code }. Numbers starting with + or 00 are international; "
      .. "otherwise use the country's calling code (US/CA 1, GB 44, DE 49, FR 33, NL 31, CH 41) "
      .. "and drop one leading trunk 0 (not for US/CA). Ignore spaces, dots, dashes, parentheses "
      .. "and a '(0)'. Return false when the result is not 8 to 15 digits or the country is unknown.",
  signature = "function({ number = string, country = string }) -> string | false",
  tests = {
    { { number = "(415) 555-0100", country = "US" }, "+14155550100" },
    { { number = "030 1234567", country = "DE" }, "+49301234567" },
    { { number = "+44 (0)20 7946 0958", country = "DE" }, "+442079460958" },
    { { number = "0044 20 7946 0958", country = "US" }, "+442079460958" },
    { { number = "12", country = "US" }, false },
    { { number = "555-0100", country = "XX" }, false },
  },
}

local parse_date = bp:lua {
  name = "parse_date",
  task = "Parse a calendar date into ISO 8601 (YYYY-MM-DD). Accept YYYY-MM-DD, YYYY/MM/DD, "
      .. "MM/DD/YYYY (slashes are US order), DD.MM.YYYY (dots are European order), "
      .. "'14 March 1985', 'March 14, 1985' and three-letter month names in any case. Check that "
      .. "the day exists in that month (leap years included). Return false otherwise.",
  signature = "function(text) -> string | false",
  tests = {
    { "1985-03-14", "1985-03-14" },
    { "03/14/1985", "1985-03-14" },
    { "14.03.1985", "1985-03-14" },
    { "14 March 1985", "1985-03-14" },
    { "mar 14, 1985", "1985-03-14" },
    { "29.02.2023", false },
    { "29.02.2024", "2024-02-29" },
    { "someday", false },
  },
}

-- RFC 4180 fields of one line (no embedded newlines in this blueprint's inputs).
local function split_csv_line(line)
  local fields, i, n = {}, 1, #line
  while true do
    if string.sub(line, i, i) == '"' then
      local value, j = {}, i + 1
      while true do
        local q = string.find(line, '"', j, true)
        if not q then error("unterminated quoted field in: " .. line) end
        value[#value + 1] = string.sub(line, j, q - 1)
        if string.sub(line, q + 1, q + 1) == '"' then
          value[#value + 1] = '"'
          j = q + 2
        else
          i = q + 1
          break
        end
      end
      fields[#fields + 1] = table.concat(value)
    else
      local comma = string.find(line, ",", i, true) or n + 1
      fields[#fields + 1] = string.sub(line, i, comma - 1)
      i = comma
    end
    if i > n or string.sub(line, i, i) ~= "," then break end
    i = i + 1
    if i > n then fields[#fields + 1] = "" break end
  end
  return fields
end

function bp.run(input)
  local rows = {}
  for line in string.gmatch(input.csv, "[^\r\n]+") do rows[#rows + 1] = split_csv_line(line) end
  if #rows == 0 then error("the CSV has no header line") end
  local column = {}
  for i, name in ipairs(rows[1]) do column[string.lower(name)] = i end
  for _, required in ipairs({ "name", "phone", "birthday" }) do
    if not column[required] then error("the CSV header has no '" .. required .. "' column") end
  end
  local default_country = input.default_country or "US"

  local names, phones, dates = {}, {}, {}
  for r = 2, #rows do
    local f = rows[r]
    names[#names + 1] = f[column.name] or ""
    local country = column.country and f[column.country] or ""
    if country == "" then country = default_country end
    phones[#phones + 1] = { number = f[column.phone] or "", country = string.upper(country) }
    dates[#dates + 1] = f[column.birthday] or ""
  end

  local contacts, rejected = {}, {}
  if #names > 0 then
    names = normalize_name:map(names)
    local e164 = normalize_phone:map(phones)
    local iso = parse_date:map(dates)
    for i = 1, #names do
      local row = i + 1  -- the line number in the CSV, header included
      if not e164[i] then
        rejected[#rejected + 1] = { row = row, reason = "phone: cannot normalize '" .. phones[i].number .. "'" }
      elseif not iso[i] then
        rejected[#rejected + 1] = { row = row, reason = "birthday: cannot parse '" .. dates[i] .. "'" }
      else
        contacts[#contacts + 1] = { row = row, name = names[i], phone = e164[i], birthday = iso[i] }
      end
    end
  end
  rote.log(#names, "rows,", #contacts, "normalized,", #rejected, "rejected")
  return {
    contacts = contacts,
    rejected = rejected,
    counts = { rows = #names, ok = #contacts, rejected = #rejected },
  }
end

return bp
