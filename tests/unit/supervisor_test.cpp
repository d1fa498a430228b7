#include "supervisor/supervisor.h"

#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/protocol.h"

namespace tpujob::supervisor {
namespace TPUJOB_TEST_NS {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

std::string ReadFile(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

void WriteFileAtomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".writing";
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    file << text;
  }
  fs::rename(tmp, path);
}

template <typename Condition>
bool WaitFor(Condition condition, milliseconds timeout = seconds(10)) {
  const auto deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// --- Pure functions ---

TEST(SupervisorTest, UnquotesGoQuotedStrings) {
  EXPECT_EQ(UnquoteGo(R"("plain")"), "plain");
  EXPECT_EQ(UnquoteGo(R"("")"), "");
  EXPECT_EQ(UnquoteGo(R"("a\"b\\c")"), "a\"b\\c");
  EXPECT_EQ(UnquoteGo(R"("line\nnext\ttab")"), "line\nnext\ttab");
  EXPECT_EQ(UnquoteGo(R"("\u0041\x42\u00e9")"), "AB\xc3\xa9");
  EXPECT_EQ(UnquoteGo(R"("\U0001F600")"), "\xf0\x9f\x98\x80");
  EXPECT_EQ(UnquoteGo(R"("\101")"), "A");
  EXPECT_EQ(UnquoteGo(R"("keep \q and \u12")"), R"(keep \q and \u12)");
  EXPECT_EQ(UnquoteGo("unquoted"), std::nullopt);
  EXPECT_EQ(UnquoteGo(R"("open)"), std::nullopt);
  EXPECT_EQ(UnquoteGo(R"("a"b")"), std::nullopt);
  EXPECT_EQ(UnquoteGo(R"("trailing\")"), std::nullopt);
}

TEST(SupervisorTest, ParsesAnnotationsFileSkippingGarbage) {
  const auto annotations = ParseAnnotations(
      "kubernetes.io/config.seen=\"2024-01-01T00:00:00Z\"\n"
      "tpujob.dev/barrier=\"3\"\n"
      "garbage line without equals\n"
      "=\"no key\"\n"
      "unquoted=value\n"
      "tpujob.dev/generation=\"4\"\r\n"
      "json=\"{\\\"a\\\":[1,2]}\\n\"\n"
      "\n");
  EXPECT_EQ(annotations.size(), 4u);
  EXPECT_EQ(annotations.at("tpujob.dev/barrier"), "3");
  EXPECT_EQ(annotations.at("tpujob.dev/generation"), "4");
  EXPECT_EQ(annotations.at("json"), "{\"a\":[1,2]}\n");
  EXPECT_EQ(annotations.count("unquoted"), 0u);
  EXPECT_EQ(AnnotationGeneration(annotations, kBarrierAnnotation), 3);
  EXPECT_EQ(AnnotationGeneration(annotations, kGenerationAnnotation), 4);
}

TEST(SupervisorTest, MissingOrUnparsableGenerationsAreZero) {
  const std::map<std::string, std::string> annotations = {
      {"a", "-1"}, {"b", "1x"}, {"c", ""}, {"d", "99999999999999999999999"},
      {"e", "+2"}, {"f", " 7 "}};
  EXPECT_EQ(AnnotationGeneration(annotations, "missing"), 0);
  for (const char* key : {"a", "b", "c", "d", "e"}) {
    EXPECT_EQ(AnnotationGeneration(annotations, key), 0) << key;
  }
  EXPECT_EQ(AnnotationGeneration(annotations, "f"), 7);
  EXPECT_EQ(ParseGeneration("12"), 12);
  EXPECT_EQ(ParseGeneration("0"), 0);
  EXPECT_EQ(ParseGeneration("-3"), std::nullopt);
}

TEST(SupervisorTest, ParsesTheProgramEnvSkippingLinesWithoutAName) {
  const auto env =
      ParseProgramEnv("MEGASCALE_NUM_SLICES=3\nno-equals\n=x\nTPU_CONFIG={\"a\":\"b=c\"}\nEMPTY=");
  ASSERT_EQ(env.size(), 3u);
  EXPECT_EQ(env[0], (std::pair<std::string, std::string>{"MEGASCALE_NUM_SLICES", "3"}));
  EXPECT_EQ(env[1], (std::pair<std::string, std::string>{"TPU_CONFIG", R"({"a":"b=c"})"}));
  EXPECT_EQ(env[2], (std::pair<std::string, std::string>{"EMPTY", ""}));
  EXPECT_TRUE(ParseProgramEnv("").empty());
}

TEST(SupervisorTest, FormatsMessages) {
  EXPECT_EQ(FormatMessage({.state = "barrier", .generation = 0}),
            R"({"state":"barrier","generation":0})");
  EXPECT_EQ(FormatMessage({.state = "exited", .generation = 2, .exit_code = 3}),
            R"({"state":"exited","generation":2,"exit":3})");
  EXPECT_EQ(FormatMessage({.state = "stopped", .generation = 1, .exit_code = 0, .next = 2}),
            R"({"state":"stopped","generation":1,"exit":0,"next":2})");
  EXPECT_EQ(FormatMessage({.state = "error", .generation = 1, .error = "a \"b\"\n\x01"}),
            R"({"state":"error","generation":1,"error":"a \"b\"\n\u0001"})");
}

class SupervisorDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/supervisor-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    fs::create_directories(dir_ / "state");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(SupervisorDirTest, ReadsAndWritesTheStateFile) {
  const std::string state = (dir_ / "state").string();
  EXPECT_EQ(ReadStateGeneration(state), 0);
  std::string error;
  ASSERT_TRUE(WriteStateGeneration(state, 5, &error)) << error;
  EXPECT_EQ(ReadFile(dir_ / "state" / "generation"), "5\n");
  EXPECT_EQ(ReadStateGeneration(state), 5);
  EXPECT_FALSE(fs::exists(dir_ / "state" / "generation.tmp"));
  WriteFileAtomically(dir_ / "state" / "generation", "garbage");
  EXPECT_EQ(ReadStateGeneration(state), 0);
  EXPECT_EQ(ReadStateGeneration((dir_ / "missing").string()), 0);
  EXPECT_FALSE(WriteStateGeneration((dir_ / "no" / "such" / "dir").string(), 1, &error));
  EXPECT_NE(error.find("cannot create"), std::string::npos) << error;
}

TEST_F(SupervisorDirTest, ReadsOptionsFromTheEnvironment) {
  std::map<std::string, std::string> env;
  const auto getenv = [&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  std::string error;
  auto options = OptionsFromEnvironment(getenv, &error);
  ASSERT_TRUE(options) << error;
  EXPECT_EQ(options->podinfo_path, kDefaultPodinfoPath);
  EXPECT_EQ(options->state_dir, kDefaultStateDir);
  EXPECT_EQ(options->message_path, kDefaultMessagePath);
  EXPECT_EQ(options->grace, seconds(kDefaultGraceSeconds));
  EXPECT_EQ(options->poll, milliseconds(kDefaultPollMs));
  env = {{kPodinfoEnv, "/p"}, {kGraceSecondsEnv, "5"}, {kPollMsEnv, "20"}};
  options = OptionsFromEnvironment(getenv, &error);
  ASSERT_TRUE(options) << error;
  EXPECT_EQ(options->podinfo_path, "/p");
  EXPECT_EQ(options->grace, seconds(5));
  EXPECT_EQ(options->poll, milliseconds(20));
  env = {{kGraceSecondsEnv, "soon"}};
  EXPECT_FALSE(OptionsFromEnvironment(getenv, &error));
  EXPECT_NE(error.find(kGraceSecondsEnv), std::string::npos) << error;
}

// --- The binary, run as the entrypoint would be ---

class SupervisorProcessTest : public SupervisorDirTest {
 protected:
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    SupervisorDirTest::TearDown();
  }

  fs::path annotations() const { return dir_ / "annotations"; }
  fs::path message() const { return dir_ / "message"; }

  void SetAnnotations(const std::map<std::string, std::string>& values) {
    std::string text;
    for (const auto& [key, value] : values) text += key + "=\"" + value + "\"\n";
    WriteFileAtomically(annotations(), text);
  }

  // Starts the supervisor running `sh -c script`.
  void Start(const std::string& script, int grace_seconds = 30) {
    Start(std::vector<std::string>{"/bin/sh", "-c", script}, grace_seconds);
  }
  void Start(const std::vector<std::string>& program, int grace_seconds = 30) {
    std::vector<std::string> args = {TPUJOB_SUPERVISE_BINARY, "--"};
    args.insert(args.end(), program.begin(), program.end());
    const std::map<std::string, std::string> env = {
        {kPodinfoEnv, annotations().string()},
        {kStateEnv, (dir_ / "state").string()},
        {kMessageEnv, message().string()},
        {kGraceSecondsEnv, std::to_string(grace_seconds)},
        {kPollMsEnv, "10"},
        {"DIR", dir_.string()},
        {"PATH", "/usr/bin:/bin"}};
    const std::string log = (dir_ / "supervisor.log").string();
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      for (const auto& [key, value] : env) ::setenv(key.c_str(), value.c_str(), 1);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, STDERR_FILENO);
      std::vector<char*> argv;
      for (auto& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(126);
    }
    started_ = Clock::now();
  }

  // The supervisor's exit code, or -1 if it did not exit within `timeout`.
  int WaitExit(milliseconds timeout = seconds(10)) {
    int status = 0;
    int code = -1;
    WaitFor(
        [&] {
          if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
          code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          pid_ = -1;
          return true;
        },
        timeout);
    return code;
  }

  bool AwaitMessage(const std::string& expected, milliseconds timeout = seconds(10)) {
    return WaitFor([&] { return ReadFile(message()) == expected; }, timeout);
  }

  std::string Log() const { return ReadFile(dir_ / "supervisor.log"); }

  pid_t pid_ = -1;
  Clock::time_point started_;
};

TEST_F(SupervisorProcessTest, WaitsAtTheBarrierThenRunsTheProgramAndExitsWithItsCode) {
  SetAnnotations({{"other", "x"}});
  Start("echo \"$TPUJOB_GENERATION\" > \"$DIR/generation-seen\"; exit 3");
  ASSERT_TRUE(AwaitMessage(R"({"state":"barrier","generation":0})")) << ReadFile(message());
  std::this_thread::sleep_for(milliseconds(300));  // the program must not start meanwhile
  EXPECT_FALSE(fs::exists(dir_ / "generation-seen"));
  EXPECT_EQ(::waitpid(pid_, nullptr, WNOHANG), 0) << "the supervisor exited at the barrier";

  SetAnnotations({{"other", "x"}, {kBarrierAnnotation, "1"}});
  EXPECT_EQ(WaitExit(), 3) << Log();
  EXPECT_EQ(ReadFile(dir_ / "generation-seen"), "1\n");
  EXPECT_EQ(ReadFile(message()), R"({"state":"exited","generation":1,"exit":3})");
  EXPECT_EQ(ReadFile(dir_ / "state" / "generation"), "1\n");
  EXPECT_NE(Log().find("exited with code 3"), std::string::npos) << Log();
}

TEST_F(SupervisorProcessTest, ARestartWaitsForTheNextBarrier) {
  std::string error;
  ASSERT_TRUE(WriteStateGeneration((dir_ / "state").string(), 1, &error)) << error;
  SetAnnotations({{kBarrierAnnotation, "1"}, {kGenerationAnnotation, "1"}});
  Start("echo \"$TPUJOB_GENERATION\" > \"$DIR/generation-seen\"; exit 0");
  ASSERT_TRUE(AwaitMessage(R"({"state":"barrier","generation":1})")) << ReadFile(message());
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_FALSE(fs::exists(dir_ / "generation-seen"));

  SetAnnotations({{kBarrierAnnotation, "2"}, {kGenerationAnnotation, "2"}});
  EXPECT_EQ(WaitExit(), 0) << Log();
  EXPECT_EQ(ReadFile(dir_ / "generation-seen"), "2\n");
  EXPECT_EQ(ReadFile(message()), R"({"state":"exited","generation":2,"exit":0})");
  EXPECT_EQ(ReadStateGeneration((dir_ / "state").string()), 2);
}

// An elastic job restarted in place on another slice count: the generation the barrier opens
// runs with the operator's values over the container's own, as written when the barrier opened.
TEST_F(SupervisorProcessTest, TheProgramEnvAnnotationSetsTheVariablesOfTheGenerationItStarts) {
  SetAnnotations({{kBarrierAnnotation, "0"}});
  Start("echo \"$MEGASCALE_NUM_SLICES|$TPUJOB_GENERATION|$TPU_CONFIG|$PATH\" > \"$DIR/seen\"");
  ASSERT_TRUE(AwaitMessage(R"({"state":"barrier","generation":0})")) << ReadFile(message());
  // The downward API file quotes values as Go does: the lines are joined by \n, quotes escaped.
  WriteFileAtomically(annotations(),
                      std::string(kBarrierAnnotation) + "=\"1\"\n" + kProgramEnvAnnotation +
                          "=\"MEGASCALE_NUM_SLICES=3\\nTPU_CONFIG={\\\"num_slices\\\":3}\\n"
                          "TPUJOB_GENERATION=7\"\n");
  EXPECT_EQ(WaitExit(), 0) << Log();
  // TPUJOB_GENERATION stays the supervisor's; PATH, not named, stays the container's.
  EXPECT_EQ(ReadFile(dir_ / "seen"), "3|1|{\"num_slices\":3}|/usr/bin:/bin\n") << Log();
  EXPECT_NE(Log().find("generation 1 runs with MEGASCALE_NUM_SLICES=3"), std::string::npos)
      << Log();
}

TEST_F(SupervisorProcessTest, AStopOrderSendsSigtermAndExits143) {
  SetAnnotations({{kBarrierAnnotation, "1"}, {kGenerationAnnotation, "1"}});
  Start(
      "trap 'echo term > \"$DIR/term\"; exit 0' TERM; echo up > \"$DIR/up\"; "
      "while true; do sleep 0.05; done");
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_ / "up"); })) << Log();
  EXPECT_EQ(ReadFile(message()), R"({"state":"running","generation":1})");

  SetAnnotations({{kBarrierAnnotation, "1"}, {kGenerationAnnotation, "2"}});
  EXPECT_EQ(WaitExit(), kStoppedExitCode) << Log();
  EXPECT_EQ(ReadFile(dir_ / "term"), "term\n");
  EXPECT_EQ(ReadFile(message()), R"({"state":"stopped","generation":1,"exit":0,"next":2})");
  EXPECT_NE(Log().find("stop order"), std::string::npos) << Log();
}

TEST_F(SupervisorProcessTest, AProgramIgnoringSigtermIsKilledAfterTheGracePeriod) {
  SetAnnotations({{kBarrierAnnotation, "1"}});
  Start("trap '' TERM; echo up > \"$DIR/up\"; while true; do sleep 0.05; done",
        /*grace_seconds=*/1);
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_ / "up"); })) << Log();

  const auto ordered = Clock::now();
  SetAnnotations({{kBarrierAnnotation, "1"}, {kGenerationAnnotation, "2"}});
  EXPECT_EQ(WaitExit(), kStoppedExitCode) << Log();
  const auto elapsed = Clock::now() - ordered;
  EXPECT_GE(elapsed, seconds(1));  // the grace period; exit 137 below shows the SIGKILL
  EXPECT_EQ(ReadFile(message()), R"({"state":"stopped","generation":1,"exit":137,"next":2})");
  EXPECT_NE(Log().find("SIGKILL"), std::string::npos) << Log();
}

TEST_F(SupervisorProcessTest, SigtermToTheSupervisorIsForwardedToTheProgram) {
  SetAnnotations({{kBarrierAnnotation, "1"}});
  Start(
      "trap 'echo term > \"$DIR/term\"; exit 7' TERM; echo up > \"$DIR/up\"; "
      "while true; do sleep 0.05; done");
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_ / "up"); })) << Log();
  ASSERT_EQ(::kill(pid_, SIGTERM), 0);
  EXPECT_EQ(WaitExit(), 7) << Log();
  EXPECT_EQ(ReadFile(dir_ / "term"), "term\n");
  EXPECT_EQ(ReadFile(message()), R"({"state":"terminated","generation":1,"exit":7})");
}

TEST_F(SupervisorProcessTest, SigtermAtTheBarrierExits143) {
  Start("touch \"$DIR/ran\"");
  ASSERT_TRUE(AwaitMessage(R"({"state":"barrier","generation":0})")) << ReadFile(message());
  ASSERT_EQ(::kill(pid_, SIGTERM), 0);
  EXPECT_EQ(WaitExit(), kStoppedExitCode) << Log();
  EXPECT_EQ(ReadFile(message()), R"({"state":"terminated","generation":0})");
  EXPECT_FALSE(fs::exists(dir_ / "ran"));
}

TEST_F(SupervisorProcessTest, AProgramThatCannotBeExecutedExits127) {
  SetAnnotations({{kBarrierAnnotation, "1"}});
  Start(std::vector<std::string>{(dir_ / "no-such-program").string()});
  EXPECT_EQ(WaitExit(), 127) << Log();
  EXPECT_EQ(ReadFile(message()), R"({"state":"exited","generation":1,"exit":127})");
  EXPECT_NE(Log().find("cannot execute"), std::string::npos) << Log();
}

// Runs a command, returning its exit code and stdout.
std::pair<int, std::string> RunCommand(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  std::string output;
  char buffer[256];
  while (const size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

TEST_F(SupervisorDirTest, UsageErrorsExit2) {
  EXPECT_EQ(RunCommand(std::string(TPUJOB_SUPERVISE_BINARY) + " 2>/dev/null").first, 2);
  EXPECT_EQ(RunCommand(std::string(TPUJOB_SUPERVISE_BINARY) + " -- 2>/dev/null").first, 2);
  EXPECT_EQ(RunCommand(std::string(TPUJOB_SUPERVISE_BINARY) + " --bogus 2>/dev/null").first, 2);
  const auto [code, help] = RunCommand(std::string(TPUJOB_SUPERVISE_BINARY) + " --help");
  EXPECT_EQ(code, 0);
  for (const char* word : {kBarrierAnnotation, kGenerationAnnotation, kPodinfoEnv, kStateEnv,
                           kMessageEnv, kGraceSecondsEnv, kPollMsEnv, "143", "--install"}) {
    EXPECT_NE(help.find(word), std::string::npos) << word;
  }
}

TEST_F(SupervisorDirTest, InstallCopiesTheBinaryExecutable) {
  const fs::path dest = dir_ / "shared" / "bin" / "tpujob-supervise";
  const auto [code, output] =
      RunCommand(std::string(TPUJOB_SUPERVISE_BINARY) + " --install " + dest.string() + " 2>&1");
  ASSERT_EQ(code, 0) << output;
  struct stat st {};
  ASSERT_EQ(::stat(dest.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_FALSE(fs::exists(dest.string() + ".tmp"));
  EXPECT_EQ(ReadFile(dest), ReadFile(TPUJOB_SUPERVISE_BINARY));
  const auto [version_code, version] = RunCommand(dest.string() + " --version");
  EXPECT_EQ(version_code, 0);
  EXPECT_EQ(version.rfind("tpujob-supervise ", 0), 0u) << version;
}

TEST(SupervisorTest, TheBinaryIsStatic) {
  if (!TPUJOB_SUPERVISE_STATIC) GTEST_SKIP() << "sanitizer or fuzzing build: linked dynamically";
  // No program interpreter (the dynamic loader) in the program headers.
  const std::string elf = ReadFile(TPUJOB_SUPERVISE_BINARY);
  ASSERT_GE(elf.size(), sizeof(Elf64_Ehdr));
  Elf64_Ehdr header;
  std::memcpy(&header, elf.data(), sizeof(header));
  ASSERT_EQ(std::string(reinterpret_cast<const char*>(header.e_ident), 4),
            "\x7f"
            "ELF");
  ASSERT_EQ(header.e_ident[EI_CLASS], ELFCLASS64);
  for (int i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr program_header;
    const size_t offset = header.e_phoff + static_cast<size_t>(i) * header.e_phentsize;
    ASSERT_LE(offset + sizeof(program_header), elf.size());
    std::memcpy(&program_header, elf.data() + offset, sizeof(program_header));
    EXPECT_NE(program_header.p_type, static_cast<Elf64_Word>(PT_INTERP));
    EXPECT_NE(program_header.p_type, static_cast<Elf64_Word>(PT_DYNAMIC));
  }
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::supervisor
