#include "metrics/registry.h"

#include <dirent.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tpujob::metrics {
namespace {

bool ValidName(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

std::string_view TypeName(Type type) {
  switch (type) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// {a="x",b="y"} with `extra` (le="...") appended; "" when there are no labels at all.
std::string LabelText(const std::vector<std::string>& names, const std::vector<std::string>& values,
                      std::string_view extra_name = {}, std::string_view extra_value = {}) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += names[i] + "=\"" + EscapeLabelValue(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    out += out.empty() ? "{" : ",";
    out += std::string(extra_name) + "=\"" + std::string(extra_value) + "\"";
  }
  if (!out.empty()) out += "}";
  return out;
}

void AtomicAdd(std::atomic<double>& target, double v) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + v, std::memory_order_relaxed)) {
  }
}

template <typename T>
std::unique_ptr<T> MakeChild(const std::vector<double>* bounds) {
  if constexpr (std::is_same_v<T, Histogram>) {
    return std::make_unique<Histogram>(bounds);
  } else {
    (void)bounds;
    return std::make_unique<T>();
  }
}

}  // namespace

void Counter::Inc(double v) {
  if (v > 0) AtomicAdd(value_, v);
}

void Counter::SetCumulative(double v) {
  double current = value_.load(std::memory_order_relaxed);
  while (v > current && !value_.compare_exchange_weak(current, v, std::memory_order_relaxed)) {
  }
}

void Gauge::Add(double v) { AtomicAdd(value_, v); }

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), buckets_(bounds->size() + 1, 0) {}

void Histogram::Observe(double v) {
  const size_t i = std::lower_bound(bounds_->begin(), bounds_->end(), v) - bounds_->begin();
  std::lock_guard<std::mutex> guard(mu_);
  ++buckets_[i];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::Take() const {
  Snapshot snapshot;
  std::lock_guard<std::mutex> guard(mu_);
  uint64_t running = 0;
  for (uint64_t n : buckets_) {
    running += n;
    snapshot.cumulative.push_back(running);
  }
  snapshot.sum = sum_;
  snapshot.count = count_;
  return snapshot;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) bounds.push_back(v);
  return bounds;
}

template <typename T>
T& Family<T>::With(std::initializer_list<std::string_view> values) {
  std::vector<std::string> owned;
  owned.reserve(values.size());
  for (std::string_view v : values) owned.emplace_back(v);
  return With(owned);
}

template <typename T>
T& Family<T>::With(const std::vector<std::string>& values) {
  std::lock_guard<std::mutex> guard(mu_);
  auto it = children_.find(values);
  if (it != children_.end()) return *it->second;
  std::vector<std::string> key = values;
  if (key.size() != labels_.size()) {
    spdlog::error(
        "msg=\"metric used with the wrong number of label values\" metric={} want={} "
        "got={}",
        name_, labels_.size(), key.size());
    key.resize(labels_.size());
    it = children_.find(key);
    if (it != children_.end()) return *it->second;
  }
  auto& child = children_[key];
  child = MakeChild<T>(&bounds_);
  return *child;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

void Registry::Check(const std::string& name, Type type, const std::vector<std::string>& labels) {
  bool ok = ValidName(name, true);
  for (const auto& label : labels) {
    ok = ok && ValidName(label, false) && !label.starts_with("__") && label != "le";
  }
  if (type == Type::kCounter) ok = ok && name.ends_with("_total");
  if (!ok) {
    spdlog::critical("msg=\"invalid metric declaration\" metric={}", name);
    std::abort();
  }
}

template <typename T>
Family<T>& Registry::Add(std::unique_ptr<Family<T>> Entry::*slot, Type type,
                         const std::string& name, const std::string& help,
                         std::vector<std::string> labels, std::vector<double> bounds) {
  Check(name, type, labels);
  std::lock_guard<std::mutex> guard(mu_);
  auto [it, inserted] = families_.try_emplace(name);
  Entry& entry = it->second;
  if (!inserted) {
    if (entry.type != type || (entry.*slot)->labels_ != labels) {
      spdlog::critical("msg=\"metric declared twice, differently\" metric={}", name);
      std::abort();
    }
    return *(entry.*slot);
  }
  entry.type = type;
  (entry.*slot).reset(new Family<T>(name, help, std::move(labels), type, std::move(bounds)));
  if ((entry.*slot)->labels_.empty()) (entry.*slot)->With({});
  return *(entry.*slot);
}

CounterFamily& Registry::AddCounter(const std::string& name, const std::string& help,
                                    std::vector<std::string> labels) {
  return Add(&Entry::counter, Type::kCounter, name, help, std::move(labels));
}

GaugeFamily& Registry::AddGauge(const std::string& name, const std::string& help,
                                std::vector<std::string> labels) {
  return Add(&Entry::gauge, Type::kGauge, name, help, std::move(labels));
}

HistogramFamily& Registry::AddHistogram(const std::string& name, const std::string& help,
                                        std::vector<std::string> labels,
                                        std::vector<double> bounds) {
  if (bounds.empty() || !std::is_sorted(bounds.begin(), bounds.end()) ||
      std::adjacent_find(bounds.begin(), bounds.end()) != bounds.end()) {
    spdlog::critical("msg=\"histogram bounds must increase strictly\" metric={}", name);
    std::abort();
  }
  return Add(&Entry::histogram, Type::kHistogram, name, help, std::move(labels), std::move(bounds));
}

int Registry::AddCollector(std::function<void()> collect) {
  std::lock_guard<std::mutex> guard(collect_mu_);
  const int id = next_collector_++;
  collectors_.emplace(id, std::move(collect));
  return id;
}

void Registry::RemoveCollector(int id) {
  std::lock_guard<std::mutex> guard(collect_mu_);
  collectors_.erase(id);
}

std::string Registry::Render() {
  {
    std::lock_guard<std::mutex> guard(collect_mu_);
    for (const auto& [id, collect] : collectors_) collect();
  }

  std::string out;
  std::lock_guard<std::mutex> guard(mu_);
  for (const auto& [name, entry] : families_) {
    auto header = [&](const std::string& help) {
      out += "# HELP " + name + " " + EscapeHelp(help) + "\n";
      out += "# TYPE " + name + " " + std::string(TypeName(entry.type)) + "\n";
    };
    // Counters and gauges: one sample per child.
    auto scalars = [&](const auto& family) {
      header(family.help_);
      std::lock_guard<std::mutex> family_guard(family.mu_);
      for (const auto& [values, child] : family.children_) {
        out += name + LabelText(family.labels_, values) + " " + FormatValue(child->Value()) + "\n";
      }
    };
    switch (entry.type) {
      case Type::kCounter:
        scalars(*entry.counter);
        break;
      case Type::kGauge:
        scalars(*entry.gauge);
        break;
      case Type::kHistogram: {
        const auto& family = *entry.histogram;
        header(family.help_);
        std::lock_guard<std::mutex> family_guard(family.mu_);
        for (const auto& [values, child] : family.children_) {
          const Histogram::Snapshot s = child->Take();
          for (size_t i = 0; i <= family.bounds_.size(); ++i) {
            const std::string le =
                i < family.bounds_.size() ? FormatValue(family.bounds_[i]) : "+Inf";
            out += name + "_bucket" + LabelText(family.labels_, values, "le", le) + " " +
                   std::to_string(s.cumulative[i]) + "\n";
          }
          out +=
              name + "_sum" + LabelText(family.labels_, values) + " " + FormatValue(s.sum) + "\n";
          out += name + "_count" + LabelText(family.labels_, values) + " " +
                 std::to_string(s.count) + "\n";
        }
        break;
      }
    }
  }
  return out;
}

Registry& DefaultRegistry() {
  static Registry* registry = new Registry();  // never destroyed: used until exit
  return *registry;
}

namespace {

// Fields 14 (utime) and 15 (stime) of /proc/self/stat, in clock ticks; field 22 is the start
// time in ticks after boot.
struct ProcStat {
  double cpu_seconds = 0;
  double start_ticks = 0;
};

ProcStat ReadProcStat() {
  ProcStat stat;
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return stat;
  const auto close = line.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return stat;
  std::istringstream fields(line.substr(close + 2));
  std::vector<std::string> f;
  for (std::string field; fields >> field;) f.push_back(field);
  // f[0] is field 3 (state); field N is f[N - 3].
  if (f.size() < 20) return stat;
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  stat.cpu_seconds = (std::atof(f[11].c_str()) + std::atof(f[12].c_str())) / ticks;
  stat.start_ticks = std::atof(f[19].c_str());
  return stat;
}

double BootTime() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime") {
      in >> value;
      return value;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

double ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  double size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

double OpenFds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  double n = 0;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // the descriptor opendir itself holds
}

}  // namespace

void AddProcessMetrics(Registry& registry) {
  auto& rss =
      registry.AddGauge("process_resident_memory_bytes", "Resident memory size in bytes.").With({});
  auto& cpu = registry
                  .AddCounter("process_cpu_seconds_total",
                              "Total user and system CPU time spent in "
                              "seconds.")
                  .With({});
  auto& start = registry
                    .AddGauge("process_start_time_seconds",
                              "Start time of the process since unix epoch in seconds.")
                    .With({});
  auto& fds = registry.AddGauge("process_open_fds", "Number of open file descriptors.").With({});
  const ProcStat at_start = ReadProcStat();
  start.Set(BootTime() + at_start.start_ticks / static_cast<double>(::sysconf(_SC_CLK_TCK)));
  registry.AddCollector([&rss, &cpu, &fds] {
    rss.Set(ResidentBytes());
    cpu.SetCumulative(ReadProcStat().cpu_seconds);
    fds.Set(OpenFds());
  });
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

}  // namespace tpujob::metrics
