#include "metrics/tls.h"

#include <arpa/inet.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "base/strings.h"

namespace tpujob::metrics {
namespace {

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using ExtensionPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

std::string OpensslError(const std::string& what) {
  std::string out = what;
  char buffer[256];
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    ERR_error_string_n(e, buffer, sizeof(buffer));
    out += ": ";
    out += buffer;
  }
  return out;
}

bool AddExtension(X509* cert, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  return ext != nullptr && X509_add_ext(cert, ext.get(), -1) == 1;
}

}  // namespace

kube::Result<TlsFiles> WriteSelfSignedCertificate(const std::string& dir,
                                                  const std::vector<std::string>& hosts) {
  if (hosts.empty()) {
    return std::unexpected(kube::Error::Config("a certificate needs at least one host name"));
  }
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return std::unexpected(kube::Error::Config(OpensslError("generating an EC key")));

  X509Ptr cert(X509_new());
  unsigned char serial[16];
  if (!cert || RAND_bytes(serial, sizeof(serial)) != 1) {
    return std::unexpected(kube::Error::Config(OpensslError("creating a certificate")));
  }
  serial[0] &= 0x7f;  // a positive serial number, as RFC 5280 asks
  BIGNUM* serial_bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  ASN1_INTEGER* serial_asn1 = BN_to_ASN1_INTEGER(serial_bn, nullptr);
  X509_set_serialNumber(cert.get(), serial_asn1);
  ASN1_INTEGER_free(serial_asn1);
  BN_free(serial_bn);
  X509_set_version(cert.get(), 2);                             // v3
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60 * 60);  // tolerate clock skew
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 365L * 24 * 60 * 60);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("tpujob-operator"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(hosts.front().c_str()), -1, -1,
                             0);
  X509_set_issuer_name(cert.get(), name);

  std::string san;
  for (const auto& host : hosts) {
    if (!san.empty()) san += ",";
    san += (IsIpAddress(host) ? "IP:" : "DNS:") + host;
  }
  if (!AddExtension(cert.get(), NID_subject_alt_name, san) ||
      !AddExtension(cert.get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !AddExtension(cert.get(), NID_key_usage, "critical,digitalSignature") ||
      !AddExtension(cert.get(), NID_ext_key_usage, "serverAuth")) {
    return std::unexpected(kube::Error::Config(OpensslError("adding certificate extensions")));
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) {
    return std::unexpected(kube::Error::Config(OpensslError("signing the certificate")));
  }

  TlsFiles files{dir + "/tls.crt", dir + "/tls.key", {}};
  const mode_t old_mask = ::umask(077);
  FilePtr cert_out(std::fopen(files.cert_file.c_str(), "w"));
  FilePtr key_out(std::fopen(files.key_file.c_str(), "w"));
  ::umask(old_mask);
  if (!cert_out || !key_out) {
    return std::unexpected(kube::Error::Config("cannot write the certificate into " + dir));
  }
  if (PEM_write_X509(cert_out.get(), cert.get()) != 1 ||
      PEM_write_PrivateKey(key_out.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return std::unexpected(kube::Error::Config(OpensslError("writing the certificate")));
  }
  return files;
}

kube::Result<TlsFiles> LoadCertificateDir(const std::string& dir) {
  TlsFiles files{dir + "/tls.crt", dir + "/tls.key", {}};
  FilePtr cert_in(std::fopen(files.cert_file.c_str(), "r"));
  if (!cert_in) return std::unexpected(kube::Error::Config("cannot read " + files.cert_file));
  FilePtr key_in(std::fopen(files.key_file.c_str(), "r"));
  if (!key_in) return std::unexpected(kube::Error::Config("cannot read " + files.key_file));
  X509Ptr cert(PEM_read_X509(cert_in.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    return std::unexpected(
        kube::Error::Config(OpensslError(files.cert_file + " holds no PEM certificate")));
  }
  PkeyPtr key(PEM_read_PrivateKey(key_in.get(), nullptr, nullptr, nullptr));
  if (!key) {
    return std::unexpected(
        kube::Error::Config(OpensslError(files.key_file + " holds no PEM private key")));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return std::unexpected(
        kube::Error::Config(files.key_file + " does not match " + files.cert_file));
  }
  return files;
}

}  // namespace tpujob::metrics
