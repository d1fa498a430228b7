// The part of kubectl's JSONPath templates that the tests' reads use, evaluated on an object
// the test read through the API client, so that a poll costs a GET instead of a kubectl process
// (about 60 ms of CPU each; over ten thousand per suite run).
//
// Supported: literal text, and `{...}` expressions that are a path from the root: `.field`
// (a `\.` inside a field name is a dot of the name, as in `tpujob\.dev/attempt`), `[N]`, `[-1:]`
// (the last element), `[*]` (every element of an array) and `[?(@.a.b=="text")]` (the elements
// of an array whose string field equals the text). Several results are joined by one
// space, as kubectl does. A string prints as itself, an integer in decimal, a boolean as
// true/false, and a missing field as nothing (kubectl's --allow-missing-template-keys).
//
// Anything else — `range`/`end`, other filters, a result that is an object, an array, a null or a
// non-integral number (kubectl's renderings of those are its own) — yields std::nullopt: the
// caller asks kubectl, so a template outside this subset still reads exactly as before.
#pragma once

#include <cctype>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tpujob::e2e {

namespace jsonpath_detail {

// A filter `@.a.b=="text"` (or 'text'): the field's path and the string it must equal.
struct Filter {
  std::vector<std::string> path;
  std::string value;
};
inline std::optional<Filter> ParseFilter(std::string_view text) {
  const size_t eq = text.find("==");
  if (!text.starts_with("@.") || eq == std::string_view::npos) return std::nullopt;
  Filter filter;
  std::string name;
  for (size_t i = 2; i <= eq; ++i) {
    if (i == eq || text[i] == '.') {
      if (name.empty()) return std::nullopt;
      filter.path.push_back(std::move(name));
      name.clear();
      continue;
    }
    const char c = text[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return std::nullopt;
    name.push_back(c);
  }
  const std::string_view literal = text.substr(eq + 2);
  if (literal.size() < 2 || (literal.front() != '"' && literal.front() != '\'') ||
      literal.back() != literal.front()) {
    return std::nullopt;
  }
  filter.value = std::string(literal.substr(1, literal.size() - 2));
  if (filter.value.find_first_of("\"'\\") != std::string::npos) return std::nullopt;
  return filter;
}

// Applies one expression (the text between the braces) to `root`; appends the printed results.
inline bool Evaluate(const nlohmann::json& root, std::string_view expr,
                     std::vector<std::string>& out) {
  if (expr.empty() || expr.front() != '.') return false;
  std::vector<const nlohmann::json*> values{&root};
  size_t i = 0;
  while (i < expr.size()) {
    if (expr[i] == '.') {
      ++i;
      std::string name;
      while (i < expr.size() && expr[i] != '.' && expr[i] != '[') {
        if (expr[i] == '\\' && i + 1 < expr.size()) ++i;
        const char c = expr[i++];
        // Characters of kubectl's other syntax (filters, functions, unions, quoting).
        if (c == ' ' || c == '?' || c == '@' || c == ',' || c == '\'' || c == '"' || c == '(' ||
            c == ')' || c == '$' || c == '*') {
          return false;
        }
        name.push_back(c);
      }
      if (name.empty()) return false;
      std::vector<const nlohmann::json*> next;
      for (const nlohmann::json* v : values) {
        if (!v->is_object()) continue;
        auto it = v->find(name);
        if (it != v->end()) next.push_back(&*it);
      }
      values = std::move(next);
    } else if (expr.substr(i).starts_with("[?(")) {
      // A filter: the elements whose field equals a quoted string.
      const size_t close = expr.find(")]", i);
      if (close == std::string_view::npos) return false;
      const std::optional<Filter> filter = ParseFilter(expr.substr(i + 3, close - i - 3));
      if (!filter) return false;
      i = close + 2;
      std::vector<const nlohmann::json*> next;
      for (const nlohmann::json* v : values) {
        if (!v->is_array()) return false;  // kubectl: "is not array or slice"
        for (const nlohmann::json& e : *v) {
          const nlohmann::json* field = &e;
          for (const std::string& name : filter->path) {
            if (field == nullptr || !field->is_object()) {
              field = nullptr;
              break;
            }
            auto it = field->find(name);
            field = it == field->end() ? nullptr : &*it;
          }
          if (field == nullptr) continue;         // no such field: not selected
          if (!field->is_string()) return false;  // kubectl compares other types its way
          if (field->get<std::string>() == filter->value) next.push_back(&e);
        }
      }
      values = std::move(next);
    } else if (expr[i] == '[') {
      const size_t close = expr.find(']', i);
      if (close == std::string_view::npos) return false;
      const std::string_view index = expr.substr(i + 1, close - i - 1);
      i = close + 1;
      std::vector<const nlohmann::json*> next;
      if (index == "*") {
        for (const nlohmann::json* v : values) {
          if (!v->is_array()) return false;  // kubectl's order over a map's values is its own
          for (const nlohmann::json& e : *v) next.push_back(&e);
        }
      } else if (index == "-1:") {
        for (const nlohmann::json* v : values) {
          if (v->is_array() && !v->empty()) next.push_back(&v->back());
        }
      } else {
        if (index.empty() || index.size() > 6) return false;
        size_t n = 0;
        for (const char c : index) {
          if (c < '0' || c > '9') return false;
          n = n * 10 + static_cast<size_t>(c - '0');
        }
        for (const nlohmann::json* v : values) {
          if (v->is_array() && n < v->size()) next.push_back(&(*v)[n]);
        }
      }
      values = std::move(next);
    } else {
      return false;
    }
  }
  for (const nlohmann::json* v : values) {
    if (v->is_string()) {
      out.push_back(v->get<std::string>());
    } else if (v->is_number_integer()) {
      out.push_back(v->dump());
    } else if (v->is_boolean()) {
      out.push_back(v->get<bool>() ? "true" : "false");
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace jsonpath_detail

// `tmpl` applied to `object` as `kubectl get -o jsonpath=TMPL` prints it, or std::nullopt when
// the template is outside the subset above.
inline std::optional<std::string> JsonPathText(const nlohmann::json& object,
                                               std::string_view tmpl) {
  std::string text;
  size_t i = 0;
  while (i < tmpl.size()) {
    const size_t open = tmpl.find('{', i);
    const size_t close_before = tmpl.find('}', i);
    if (close_before < open) return std::nullopt;  // a stray '}'
    if (open == std::string_view::npos) {
      text.append(tmpl.substr(i));
      break;
    }
    text.append(tmpl.substr(i, open - i));
    const size_t close = tmpl.find('}', open);
    if (close == std::string_view::npos) return std::nullopt;
    std::vector<std::string> results;
    if (!jsonpath_detail::Evaluate(object, tmpl.substr(open + 1, close - open - 1), results)) {
      return std::nullopt;
    }
    for (size_t k = 0; k < results.size(); ++k) {
      if (k > 0) text.push_back(' ');
      text.append(results[k]);
    }
    i = close + 1;
  }
  return text;
}

}  // namespace tpujob::e2e
