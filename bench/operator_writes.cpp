#include "operator_writes.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "common.h"

namespace tpujob::bench {

std::optional<WriteCounts> OperatorWrites(const std::string& url) {
  const std::string command = "curl -sf --max-time 10 '" + url + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string text;
  std::array<char, 65536> buffer;
  for (size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) {
    text.append(buffer.data(), n);
  }
  if (pclose(pipe) != 0) return std::nullopt;
  const auto label = [](const std::string& line, const std::string& name) {
    const size_t at = line.find(name + "=\"");
    if (at == std::string::npos) return std::string();
    const size_t from = at + name.size() + 2;
    return line.substr(from, line.find('"', from) - from);
  };
  WriteCounts writes;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (!line.starts_with("tpujob_api_requests_total{")) continue;
    std::string verb = label(line, "verb");
    std::transform(verb.begin(), verb.end(), verb.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    if (verb != "POST" && verb != "PUT" && verb != "PATCH" && verb != "DELETE") continue;
    writes[verb + " " + label(line, "resource")] +=
        std::strtod(line.c_str() + line.rfind(' '), nullptr);
  }
  return writes;
}

std::optional<WriteCounts> SettledWrites(const std::string& url,
                                         const std::function<bool()>& settled) {
  WaitFor(settled, 60, std::chrono::milliseconds(100));
  std::optional<WriteCounts> last = OperatorWrites(url);
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto now = OperatorWrites(url);
    if (now == last) break;
    last = now;
  }
  return last;
}

WriteCounts WritesSince(const WriteCounts& before, const WriteCounts& after) {
  WriteCounts grown;
  for (const auto& [key, n] : after) {
    const double delta = n - (before.contains(key) ? before.at(key) : 0);
    if (delta > 0) grown[key] = delta;
  }
  return grown;
}

double RecoveryRun::Writes() const {
  double n = 0;
  for (const auto& [key, count] : writes) n += count;
  return n;
}

void PrintWrites(const WriteCounts& writes) {
  for (const auto& [key, n] : writes) std::printf(" %s %.0f,", key.c_str(), n);
  std::printf("\n");
}

}  // namespace tpujob::bench
