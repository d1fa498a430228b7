#include <cstdio>

#include "version.h"

int main() {
  std::printf("tpujob-operator %s\n", TPUJOB_VERSION);
  return 0;
}
