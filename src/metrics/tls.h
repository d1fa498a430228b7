// TLS material for the operator's HTTPS endpoint (/metrics).
//
// Like controller-runtime's secure metrics serving: when no certificate is mounted, the operator
// makes a self-signed one at start-up (ECDSA P-256, valid for one year, the given host names and
// addresses as subjectAltNames), so traffic is encrypted even where nobody has set up a CA. A
// scraper then either skips verification (the chart's ServiceMonitor default) or is given the
// real CA of a mounted certificate (for example one issued by cert-manager).
//
// Thread-safety: free functions without shared state.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "kube/error.h"

namespace tpujob::metrics {

struct TlsFiles {
  std::string cert_file;  // PEM certificate (chain), leaf first
  std::string key_file;   // PEM private key
  // How often a server checks the files for a renewal (at a handshake, by modification time).
  std::chrono::steady_clock::duration reload_interval = std::chrono::seconds(10);
};

// Writes `tls.crt` and `tls.key` (mode 0600) into `dir`, which must exist and be writable. Each
// entry of `hosts` becomes a DNS or IP subjectAltName; the first is also the subject's CN.
kube::Result<TlsFiles> WriteSelfSignedCertificate(const std::string& dir,
                                                  const std::vector<std::string>& hosts);

// The files `tls.crt` and `tls.key` in `dir` when both exist and hold a matching certificate
// and key; otherwise an error naming what is wrong.
kube::Result<TlsFiles> LoadCertificateDir(const std::string& dir);

}  // namespace tpujob::metrics
