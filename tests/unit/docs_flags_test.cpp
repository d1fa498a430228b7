// The flag reference (docs/cli.md) against the real binary: every flag that
// `tpujob-operator run --help`, `preflight --help` and `node-agent --help` list has a row in the
// section of its command there, with the default the binary reports; and every row there names a
// flag that still exists.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace tpujob {
namespace TPUJOB_TEST_NS {

using ::testing::Contains;
using ::testing::IsSupersetOf;

struct HelpText {
  int exit_code = -1;
  std::string text;
};

// The binary under the name kubectl-tpujob (the plugin), beside it in the build directory.
std::string PluginBinary() {
  const std::string binary = TPUJOB_OPERATOR_BINARY;
  return binary.substr(0, binary.rfind('/')) + "/kubectl-tpujob";
}

HelpText RunHelp(const std::string& command, const std::string& binary = TPUJOB_OPERATOR_BINARY) {
  const std::string line = "'" + binary + "' " + command + " --help";
  HelpText help;
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) return help;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) help.text.append(buffer, n);
  const int status = pclose(pipe);
  help.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return help;
}

// The flags of CLI11's option list and the default each shows after '=' ("" when none). CLI11
// pads the option's spec to column 30 and starts its description there, or, when the spec is
// longer, on the next line, indented 30 columns:
//   "  --health-address TEXT=:8081 host:port serving ..."
//   "  --workers INT:INT in [1 - 256]=4" + "\n" + 30 spaces + "Number of ..."
// A vector's default "[TPUUnhealthy] ..." becomes "TPUUnhealthy".
std::map<std::string, std::string> ListedFlags(const std::string& help) {
  constexpr size_t kColumn = 30;
  static const std::regex kOption(R"(^  (?:-[A-Za-z],)?(--[a-z0-9][a-z0-9-]*)(.*)$)");
  std::vector<std::string> lines;
  std::istringstream in(help);
  for (std::string line; std::getline(in, line);) lines.push_back(line);

  std::map<std::string, std::string> flags;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string spec = lines[i];
    const bool description_below =
        i + 1 < lines.size() && lines[i + 1].starts_with(std::string(kColumn, ' '));
    if (!description_below && spec.size() > kColumn) spec.resize(kColumn);
    std::smatch match;
    if (!std::regex_match(spec, match, kOption)) continue;
    std::string rest = match[2];
    while (rest.ends_with(' ')) rest.pop_back();
    if (rest.ends_with(" ...")) rest.resize(rest.size() - 4);
    std::string default_value;
    if (auto eq = rest.rfind('='); eq != std::string::npos) {
      default_value = rest.substr(eq + 1);
      if (default_value.size() >= 2 && default_value.front() == '[' &&
          default_value.back() == ']') {
        default_value = default_value.substr(1, default_value.size() - 2);
      }
    }
    flags[match[1]] = default_value;
  }
  return flags;
}

std::string ReadReference() {
  std::ifstream in(std::string(TPUJOB_SOURCE_DIR) + "/docs/cli.md");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The lines of the section under `heading` (a whole line), up to the next heading.
std::vector<std::string> Section(const std::string& readme, const std::string& heading) {
  std::vector<std::string> section;
  std::istringstream lines(readme);
  std::string line;
  bool inside = false;
  while (std::getline(lines, line)) {
    if (inside && line.starts_with("#")) break;
    if (inside) section.push_back(line);
    if (line == heading) inside = true;
  }
  return section;
}

// The cells of a Markdown table row, trimmed ("| a | b |" -> {"a", "b"}).
std::vector<std::string> Cells(const std::string& row) {
  std::vector<std::string> cells;
  std::istringstream parts(row);
  std::string cell;
  std::getline(parts, cell, '|');  // before the first '|'
  while (std::getline(parts, cell, '|')) {
    const size_t begin = cell.find_first_not_of(' ');
    const size_t end = cell.find_last_not_of(' ');
    cells.push_back(begin == std::string::npos ? "" : cell.substr(begin, end - begin + 1));
  }
  return cells;
}

// The table rows of a section by the flag they start with ("| `--workers N` | `4` | ..."):
// flag -> the row's cell in the column headed "Default".
std::map<std::string, std::string> DocumentedFlags(const std::vector<std::string>& section) {
  static const std::regex kRow(R"(^\| `(?:-[A-Za-z]`, `)?(--[a-z0-9][a-z0-9-]*)[ `])");
  std::map<std::string, std::string> rows;
  size_t default_column = 1;
  for (const std::string& line : section) {
    if (line.starts_with("| Flag |")) {
      const std::vector<std::string> header = Cells(line);
      for (size_t i = 0; i < header.size(); ++i) {
        if (header[i] == "Default") default_column = i;
      }
    }
    std::smatch match;
    if (!std::regex_search(line, match, kRow)) continue;
    const std::vector<std::string> cells = Cells(line);
    rows[match[1]] = default_column < cells.size() ? cells[default_column] : std::string();
  }
  return rows;
}

std::set<std::string> Keys(const std::map<std::string, std::string>& map) {
  std::set<std::string> keys;
  for (const auto& [key, value] : map) keys.insert(key);
  return keys;
}

// Both directions plus the defaults, for one command.
void ExpectDocumented(const std::string& command, const std::string& heading,
                      const std::set<std::string>& must_list,
                      const std::string& binary = TPUJOB_OPERATOR_BINARY) {
  const HelpText help = RunHelp(command, binary);
  ASSERT_EQ(help.exit_code, 0) << help.text;
  const std::map<std::string, std::string> listed = ListedFlags(help.text);
  // The parser must see the flags this test knows of, or it would check nothing.
  ASSERT_THAT(Keys(listed), IsSupersetOf(must_list)) << help.text;

  const std::string readme = ReadReference();
  ASSERT_FALSE(readme.empty()) << "cannot read " << TPUJOB_SOURCE_DIR << "/docs/cli.md";
  const std::vector<std::string> section = Section(readme, heading);
  ASSERT_FALSE(section.empty()) << "docs/cli.md has no section \"" << heading << "\"";
  const std::map<std::string, std::string> documented = DocumentedFlags(section);

  for (const auto& [flag, default_value] : listed) {
    auto row = documented.find(flag);
    if (row == documented.end()) {
      ADD_FAILURE() << flag << " (`tpujob-operator " << command
                    << " --help`) has no row in docs/cli.md under \"" << heading << "\"";
      continue;
    }
    if (!default_value.empty()) {
      EXPECT_NE(row->second.find(default_value), std::string::npos)
          << "docs/cli.md gives " << flag << " the default \"" << row->second
          << "\"; the binary says " << default_value;
    }
  }
  for (const auto& [flag, unused] : documented) {
    EXPECT_THAT(Keys(listed), Contains(flag))
        << "docs/cli.md documents " << flag << " under \"" << heading << "\", but `" << binary
        << " " << command << " --help` does not list it";
  }
}

TEST(DocsFlagsTest, EveryRunFlagIsInTheReference) {
  ExpectDocumented(
      "run", "## `tpujob-operator run` flags",
      {"--help", "--kubeconfig", "--health-address", "--metrics-address", "--leader-elect",
       "--leader-elect-lease-duration", "--leader-elect-identity", "--auto-uncordon-after"});
}

// Flags for debugging and the tests stay out of --help (and so out of the table above) but are
// described in their own section.
TEST(DocsFlagsTest, HiddenRunFlagsAreDescribedApartAndStayHidden) {
  const HelpText help = RunHelp("run");
  ASSERT_EQ(help.exit_code, 0) << help.text;
  const std::vector<std::string> section = Section(ReadReference(), "### Debugging flags");
  ASSERT_FALSE(section.empty()) << "docs/cli.md has no section \"### Debugging flags\"";
  std::string text;
  for (const std::string& line : section) text += line + "\n";
  for (const std::string flag : {"--debug-cache-endpoint", "--crash-after-writes"}) {
    EXPECT_NE(text.find("- `" + flag), std::string::npos)
        << flag << " is not described under \"### Debugging flags\" in docs/cli.md";
    EXPECT_EQ(ListedFlags(help.text).count(flag), 0u) << flag << " should stay out of --help";
  }
}

TEST(DocsFlagsTest, EveryPreflightFlagIsInTheReference) {
  ExpectDocumented("preflight", "## `tpujob-operator preflight` flags",
                   {"--help", "--checks", "--dev-root", "--report-file", "--log-level"});
}

TEST(DocsFlagsTest, EveryNodeAgentFlagIsInTheReference) {
  ExpectDocumented("node-agent", "## `tpujob-operator node-agent` flags",
                   {"--help", "--node-name", "--interval", "--checks", "--dev-root",
                    "--condition-type", "--fail-after", "--pass-after", "--once"});
}

TEST(DocsFlagsTest, EveryPluginFlagIsInTheReference) {
  ExpectDocumented("", "### `kubectl tpujob` global flags",
                   {"--help", "--kubeconfig", "--context", "--namespace"}, PluginBinary());
  ExpectDocumented("list", "### `kubectl tpujob list` flags", {"--help", "--status"},
                   PluginBinary());
  ExpectDocumented("run", "### `kubectl tpujob run` flags",
                   {"--help", "--tpu-type", "--image", "--env", "--dry-run", "--output"},
                   PluginBinary());
  ExpectDocumented("wait", "### `kubectl tpujob wait` flags", {"--help", "--for", "--timeout"},
                   PluginBinary());
  ExpectDocumented("logs", "### `kubectl tpujob logs` flags",
                   {"--help", "--worker", "--follow", "--since", "--attempt"}, PluginBinary());
}

TEST(DocsFlagsTest, HelpParsingFindsFlagsAndDefaults) {
  const std::string help =
      "Options:\n"
      "  -h,--help                   Print this help message and exit\n"
      "  --kubeconfig TEXT           Path to a kubeconfig file. Default: $KUBECONFIG.\n"
      "  --health-address TEXT=:8081 host:port serving /healthz.\n"
      "  --workers INT:INT in [1 - 256]=4\n"
      "                              Number of TPUJobs reconciled concurrently.\n"
      "  --hardware-condition TEXT=[TPUUnhealthy] ...\n"
      "                              Mentions --not-a-flag in its text.\n"
      "  --no-cordon                 Never cordon nodes.\n";
  EXPECT_EQ(ListedFlags(help),
            (std::map<std::string, std::string>{{"--help", ""},
                                                {"--kubeconfig", ""},
                                                {"--health-address", ":8081"},
                                                {"--workers", "4"},
                                                {"--hardware-condition", "TPUUnhealthy"},
                                                {"--no-cordon", ""}}));

  const std::vector<std::string> section = {"| Flag | Default | Meaning |",
                                            "|---|---|---|",
                                            "| `--workers N` | `4` | Concurrency. |",
                                            "| `--no-cordon` | off | Never cordon. |",
                                            "| `-h`, `--help` | | Help. |",
                                            "| `--leader-elect-id NAME` | `x` | Lease. |",
                                            "Text mentioning `--kubeconfig` outside the table."};
  EXPECT_EQ(DocumentedFlags(section),
            (std::map<std::string, std::string>{{"--workers", "`4`"},
                                                {"--no-cordon", "off"},
                                                {"--help", ""},
                                                {"--leader-elect-id", "`x`"}}));
  // The default column is found by its heading.
  EXPECT_EQ(DocumentedFlags({"| Flag | Environment variable | Default | Meaning |",
                             "| `--log-level L` | — | `info` | Level. |"}),
            (std::map<std::string, std::string>{{"--log-level", "`info`"}}));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob
