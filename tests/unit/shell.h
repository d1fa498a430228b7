// Shell: runs a command line for a unit test that must reach something from outside the
// process, as a client would (curl against the operator's own HTTP servers, openssl on a
// certificate it wrote).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace tpujob {

struct Answer {
  int exit_code = -1;  // -1 when it could not be run or did not exit normally
  std::string output;  // stdout and stderr together
};

inline Answer Shell(const std::string& command) {
  Answer answer;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return answer;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) {
    answer.output.append(buffer, n);
  }
  const int status = ::pclose(pipe);
  answer.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return answer;
}

}  // namespace tpujob
