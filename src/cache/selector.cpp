#include "cache/selector.h"

#include <algorithm>
#include <charconv>

namespace tpujob::cache {
namespace {

kube::Error SelectorError(std::string_view text, std::string_view what) {
  return kube::Error::Decode("invalid selector \"" + std::string(text) +
                             "\": " + std::string(what));
}

// --- Validation, as apimachinery's validation package does it -----------------------------------

bool IsAlphanumeric(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, at most 63 characters.
bool IsQualifiedNamePart(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (!IsAlphanumeric(name.front()) || !IsAlphanumeric(name.back())) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return IsAlphanumeric(c) || c == '-' || c == '_' || c == '.'; });
}

// A lowercase RFC 1123 subdomain: labels of [a-z0-9-] separated by dots, at most 253.
bool IsDnsSubdomain(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('.', start);
    if (end == std::string_view::npos) end = name.size();
    std::string_view label = name.substr(start, end - start);
    if (label.empty() || label.size() > 63) return false;
    auto lower_alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    if (!lower_alnum(label.front()) || !lower_alnum(label.back())) return false;
    if (!std::all_of(label.begin(), label.end(),
                     [&](char c) { return lower_alnum(c) || c == '-'; })) {
      return false;
    }
    start = end + 1;
  }
  return true;
}

std::optional<std::string> ValidateKey(std::string_view key) {
  std::string_view name = key;
  size_t slash = key.find('/');
  if (slash != std::string_view::npos) {
    std::string_view prefix = key.substr(0, slash);
    name = key.substr(slash + 1);
    if (!IsDnsSubdomain(prefix)) {
      return "key \"" + std::string(key) + "\": prefix must be a lowercase DNS subdomain";
    }
  }
  if (!IsQualifiedNamePart(name)) {
    return "key \"" + std::string(key) +
           "\": name must be 1-63 alphanumeric characters, '-', '_' or '.', starting and "
           "ending with an alphanumeric character";
  }
  return std::nullopt;
}

std::optional<std::string> ValidateValue(std::string_view value) {
  if (value.empty() || IsQualifiedNamePart(value)) return std::nullopt;
  return "value \"" + std::string(value) +
         "\": must be at most 63 alphanumeric characters, '-', '_' or '.', starting and ending "
         "with an alphanumeric character";
}

bool IsInteger(std::string_view text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

// --- Lexer ------------------------------------------------------------------------------------

enum class Token {
  kEnd,
  kIdentifier,
  kNot,
  kEquals,
  kNotEquals,
  kOpen,
  kClose,
  kComma,
  kGreater,
  kLess
};

struct Lexeme {
  Token token;
  std::string_view text;
};

bool IsSpecial(char c) { return std::string_view("=!(),<>").find(c) != std::string_view::npos; }
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::vector<Lexeme> Tokenize(std::string_view text) {
  std::vector<Lexeme> out;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (IsSpace(c)) {
      ++i;
      continue;
    }
    const bool doubled = i + 1 < text.size() && text[i + 1] == '=';
    switch (c) {
      case '=':
        out.push_back({Token::kEquals, text.substr(i, doubled ? 2 : 1)});
        i += doubled ? 2 : 1;
        continue;
      case '!':
        out.push_back({doubled ? Token::kNotEquals : Token::kNot, text.substr(i, doubled ? 2 : 1)});
        i += doubled ? 2 : 1;
        continue;
      case '(':
        out.push_back({Token::kOpen, text.substr(i, 1)});
        ++i;
        continue;
      case ')':
        out.push_back({Token::kClose, text.substr(i, 1)});
        ++i;
        continue;
      case ',':
        out.push_back({Token::kComma, text.substr(i, 1)});
        ++i;
        continue;
      case '>':
        out.push_back({Token::kGreater, text.substr(i, 1)});
        ++i;
        continue;
      case '<':
        out.push_back({Token::kLess, text.substr(i, 1)});
        ++i;
        continue;
      default:
        break;
    }
    size_t start = i;
    while (i < text.size() && !IsSpace(text[i]) && !IsSpecial(text[i])) ++i;
    out.push_back({Token::kIdentifier, text.substr(start, i - start)});
  }
  out.push_back({Token::kEnd, {}});
  return out;
}

kube::Result<LabelRequirement> Validated(std::string_view text, LabelRequirement r) {
  if (std::optional<std::string> problem = ValidateKey(r.key)) {
    return std::unexpected(SelectorError(text, *problem));
  }
  for (const std::string& value : r.values) {
    if (r.op == SelectorOp::kGreaterThan || r.op == SelectorOp::kLessThan) {
      if (!IsInteger(value)) {
        return std::unexpected(
            SelectorError(text, "value \"" + value + "\" for '>' or '<' must be an integer"));
      }
    } else if (std::optional<std::string> problem = ValidateValue(value)) {
      return std::unexpected(SelectorError(text, *problem));
    }
  }
  if (r.op == SelectorOp::kIn || r.op == SelectorOp::kNotIn) {
    std::sort(r.values.begin(), r.values.end());
    r.values.erase(std::unique(r.values.begin(), r.values.end()), r.values.end());
  }
  return r;
}

// --- Field selector escaping --------------------------------------------------------------------

std::string EscapeFieldValue(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == ',' || c == '=') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

// --- LabelRequirement
// -----------------------------------------------------------------------------

bool LabelRequirement::Matches(std::optional<std::string_view> value) const {
  switch (op) {
    case SelectorOp::kEquals:
    case SelectorOp::kIn:
      return value && std::binary_search(values.begin(), values.end(), *value);
    case SelectorOp::kNotEquals:
    case SelectorOp::kNotIn:
      return !value || !std::binary_search(values.begin(), values.end(), *value);
    case SelectorOp::kExists:
      return value.has_value();
    case SelectorOp::kDoesNotExist:
      return !value.has_value();
    case SelectorOp::kGreaterThan:
    case SelectorOp::kLessThan: {
      if (!value || values.size() != 1) return false;
      int64_t have = 0;
      int64_t want = 0;
      auto [have_end, have_ec] =
          std::from_chars(value->data(), value->data() + value->size(), have);
      if (have_ec != std::errc() || have_end != value->data() + value->size()) return false;
      std::from_chars(values[0].data(), values[0].data() + values[0].size(), want);
      return op == SelectorOp::kGreaterThan ? have > want : have < want;
    }
  }
  return false;
}

std::string LabelRequirement::ToString() const {
  auto joined = [&] {
    std::string out;
    for (size_t i = 0; i < values.size(); ++i) {
      if (i > 0) out += ',';
      out += values[i];
    }
    return out;
  };
  const std::string first = values.empty() ? std::string() : values[0];
  switch (op) {
    case SelectorOp::kEquals:
      return key + "=" + first;
    case SelectorOp::kNotEquals:
      return key + "!=" + first;
    case SelectorOp::kIn:
      return key + " in (" + joined() + ")";
    case SelectorOp::kNotIn:
      return key + " notin (" + joined() + ")";
    case SelectorOp::kExists:
      return key;
    case SelectorOp::kDoesNotExist:
      return "!" + key;
    case SelectorOp::kGreaterThan:
      return key + ">" + first;
    case SelectorOp::kLessThan:
      return key + "<" + first;
  }
  return key;
}

// --- LabelSelector ------------------------------------------------------------------------------

kube::Result<LabelSelector> LabelSelector::Parse(std::string_view text) {
  LabelSelector selector;
  const std::vector<Lexeme> tokens = Tokenize(text);
  size_t i = 0;
  auto error = [&](std::string what) { return std::unexpected(SelectorError(text, what)); };
  if (tokens[0].token == Token::kEnd) return selector;
  while (true) {
    LabelRequirement r;
    if (tokens[i].token == Token::kNot) {
      ++i;
      if (tokens[i].token != Token::kIdentifier) return error("expected a key after '!'");
      r.key = tokens[i++].text;
      r.op = SelectorOp::kDoesNotExist;
    } else if (tokens[i].token == Token::kIdentifier) {
      r.key = tokens[i++].text;
      const Lexeme& op = tokens[i];
      switch (op.token) {
        case Token::kEnd:
        case Token::kComma:
          r.op = SelectorOp::kExists;
          break;
        case Token::kEquals:
        case Token::kNotEquals:
        case Token::kGreater:
        case Token::kLess: {
          r.op = op.token == Token::kEquals      ? SelectorOp::kEquals
                 : op.token == Token::kNotEquals ? SelectorOp::kNotEquals
                 : op.token == Token::kGreater   ? SelectorOp::kGreaterThan
                                                 : SelectorOp::kLessThan;
          ++i;
          if (tokens[i].token == Token::kIdentifier) {
            r.values.emplace_back(tokens[i++].text);
          } else if ((tokens[i].token == Token::kEnd || tokens[i].token == Token::kComma) &&
                     (r.op == SelectorOp::kEquals || r.op == SelectorOp::kNotEquals)) {
            r.values.emplace_back();  // "a=" selects an empty value, as in Kubernetes
          } else {
            return error("expected a value after '" + std::string(op.text) + "'");
          }
          break;
        }
        case Token::kIdentifier: {
          if (op.text != "in" && op.text != "notin") {
            return error("expected an operator after key \"" + r.key + "\", found \"" +
                         std::string(op.text) + "\"");
          }
          r.op = op.text == "in" ? SelectorOp::kIn : SelectorOp::kNotIn;
          ++i;
          if (tokens[i].token != Token::kOpen)
            return error("expected '(' after " + std::string(op.text));
          ++i;
          if (tokens[i].token == Token::kClose) {
            r.values.emplace_back();  // "in ()" means the empty value, as in Kubernetes
          } else {
            while (true) {
              if (tokens[i].token != Token::kIdentifier) return error("expected a value in set");
              r.values.emplace_back(tokens[i++].text);
              if (tokens[i].token == Token::kComma) {
                ++i;
                continue;
              }
              break;
            }
            if (tokens[i].token != Token::kClose) return error("expected ')' to close the set");
          }
          ++i;
          break;
        }
        default:
          return error("expected an operator after key \"" + r.key + "\", found \"" +
                       std::string(op.text) + "\"");
      }
    } else {
      return error("expected a key, found \"" + std::string(tokens[i].text) + "\"");
    }
    kube::Result<LabelRequirement> valid = Validated(text, std::move(r));
    if (!valid) return std::unexpected(valid.error());
    selector.requirements_.push_back(std::move(*valid));
    if (tokens[i].token == Token::kEnd) break;
    if (tokens[i].token != Token::kComma) {
      return error("expected ',' or the end, found \"" + std::string(tokens[i].text) + "\"");
    }
    ++i;
    if (tokens[i].token == Token::kEnd) return error("trailing ','");
  }
  std::stable_sort(
      selector.requirements_.begin(), selector.requirements_.end(),
      [](const LabelRequirement& a, const LabelRequirement& b) { return a.key < b.key; });
  return selector;
}

kube::Result<LabelSelector> LabelSelector::FromJson(const nlohmann::json& json) {
  LabelSelector selector;
  if (json.is_null()) return selector;
  const std::string text = json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  auto error = [&](std::string what) { return std::unexpected(SelectorError(text, what)); };
  if (!json.is_object()) return error("expected an object");
  auto add = [&](LabelRequirement r) -> kube::Status {
    kube::Result<LabelRequirement> valid = Validated(text, std::move(r));
    if (!valid) return std::unexpected(valid.error());
    selector.requirements_.push_back(std::move(*valid));
    return {};
  };
  if (auto it = json.find("matchLabels"); it != json.end() && !it->is_null()) {
    if (!it->is_object()) return error("matchLabels must be an object");
    for (auto label = it->begin(); label != it->end(); ++label) {
      if (!label->is_string()) return error("matchLabels values must be strings");
      kube::Status added =
          add(LabelRequirement{label.key(), SelectorOp::kEquals, {label->get<std::string>()}});
      if (!added) return std::unexpected(added.error());
    }
  }
  if (auto it = json.find("matchExpressions"); it != json.end() && !it->is_null()) {
    if (!it->is_array()) return error("matchExpressions must be an array");
    for (const nlohmann::json& expression : *it) {
      if (!expression.is_object()) return error("matchExpressions items must be objects");
      auto key = expression.find("key");
      auto op = expression.find("operator");
      if (key == expression.end() || !key->is_string()) return error("expression without key");
      if (op == expression.end() || !op->is_string()) return error("expression without operator");
      LabelRequirement r{key->get<std::string>(), SelectorOp::kIn, {}};
      const std::string& op_text = op->get_ref<const std::string&>();
      if (auto values = expression.find("values");
          values != expression.end() && !values->is_null()) {
        if (!values->is_array()) return error("values must be an array");
        for (const nlohmann::json& value : *values) {
          if (!value.is_string()) return error("values must be strings");
          r.values.push_back(value.get<std::string>());
        }
      }
      if (op_text == "In" || op_text == "NotIn") {
        r.op = op_text == "In" ? SelectorOp::kIn : SelectorOp::kNotIn;
        if (r.values.empty()) return error("operator " + op_text + " needs values");
      } else if (op_text == "Exists" || op_text == "DoesNotExist") {
        r.op = op_text == "Exists" ? SelectorOp::kExists : SelectorOp::kDoesNotExist;
        if (!r.values.empty()) return error("operator " + op_text + " takes no values");
      } else {
        return error("unknown operator \"" + op_text + "\"");
      }
      kube::Status added = add(std::move(r));
      if (!added) return std::unexpected(added.error());
    }
  }
  std::stable_sort(
      selector.requirements_.begin(), selector.requirements_.end(),
      [](const LabelRequirement& a, const LabelRequirement& b) { return a.key < b.key; });
  return selector;
}

LabelSelector LabelSelector::FromLabels(const LabelMap& labels) {
  LabelSelector selector;
  for (const auto& [key, value] : labels) {
    selector.requirements_.push_back(
        LabelRequirement{key.str(), SelectorOp::kEquals, {value.str()}});
  }
  return selector;
}

bool LabelSelector::Matches(const LabelMap& labels) const {
  return std::all_of(requirements_.begin(), requirements_.end(),
                     [&](const LabelRequirement& r) { return r.Matches(labels.Get(r.key)); });
}

std::string LabelSelector::ToString() const {
  std::string out;
  for (size_t i = 0; i < requirements_.size(); ++i) {
    if (i > 0) out += ',';
    out += requirements_[i].ToString();
  }
  return out;
}

// --- FieldSelector ------------------------------------------------------------------------------

kube::Result<FieldSelector> FieldSelector::Parse(std::string_view text) {
  FieldSelector selector;
  auto error = [&](std::string what) { return std::unexpected(SelectorError(text, what)); };
  // Split on unescaped commas; unescape values as we go.
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = start;
    while (end < text.size() && text[end] != ',') end += text[end] == '\\' ? 2 : 1;
    end = std::min(end, text.size());
    std::string_view term = text.substr(start, end - start);
    start = end + 1;
    if (term.empty()) continue;
    // The first operator wins; at one position "!=" and "==" beat "=".
    size_t op_at = std::string_view::npos;
    size_t op_len = 0;
    bool equals = true;
    for (size_t i = 0; i < term.size(); ++i) {
      if (term[i] == '\\') {
        ++i;
        continue;
      }
      if (term.substr(i, 2) == "!=") {
        op_at = i, op_len = 2, equals = false;
      } else if (term.substr(i, 2) == "==") {
        op_at = i, op_len = 2;
      } else if (term[i] == '=') {
        op_at = i, op_len = 1;
      } else {
        continue;
      }
      break;
    }
    if (op_at == std::string_view::npos) {
      return error("term \"" + std::string(term) + "\" has no operator (=, == or !=)");
    }
    FieldRequirement r;
    r.field = std::string(term.substr(0, op_at));
    r.equals = equals;
    while (!r.field.empty() && IsSpace(r.field.back())) r.field.pop_back();
    while (!r.field.empty() && IsSpace(r.field.front())) r.field.erase(r.field.begin());
    if (r.field.empty()) return error("term \"" + std::string(term) + "\" has no field");
    if (r.field.find('\\') != std::string::npos) return error("field names cannot be escaped");
    std::string_view raw = term.substr(op_at + op_len);
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '\\') {
        if (raw[i] == '=') return error("unescaped '=' in value of \"" + r.field + "\"");
        r.value += raw[i];
        continue;
      }
      if (i + 1 >= raw.size() || (raw[i + 1] != '\\' && raw[i + 1] != ',' && raw[i + 1] != '=')) {
        return error("invalid escape in value of \"" + r.field + "\"");
      }
      r.value += raw[++i];
    }
    selector.requirements_.push_back(std::move(r));
  }
  return selector;
}

std::string FieldSelector::ToString() const {
  std::string out;
  for (size_t i = 0; i < requirements_.size(); ++i) {
    if (i > 0) out += ',';
    out += requirements_[i].field;
    out += requirements_[i].equals ? "=" : "!=";
    out += EscapeFieldValue(requirements_[i].value);
  }
  return out;
}

kube::Error FieldSelector::UnsupportedField(std::string_view field) {
  return kube::Error::Decode("field selector: field \"" + std::string(field) +
                             "\" is not supported for this object type");
}

}  // namespace tpujob::cache
