// Where the tests find the source tree and the binaries they start. Included into every test
// file by the build (-include); the values are defined in a file generated per test target
// (CMakeLists.txt, tpujob_test_paths), so this header, and the objects of the files that use it,
// are the same in every clone of the repository.
#pragma once

extern const char* const tpujob_test_source_dir;
extern const char* const tpujob_test_operator_binary;
extern const char* const tpujob_test_supervise_binary;

#define TPUJOB_SOURCE_DIR tpujob_test_source_dir
#define TPUJOB_OPERATOR_BINARY tpujob_test_operator_binary
#define TPUJOB_SUPERVISE_BINARY tpujob_test_supervise_binary
