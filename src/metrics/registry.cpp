#include "metrics/registry.h"

#include <dirent.h>
#include <prometheus/check_names.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "base/logging.h"

namespace tpujob::metrics {
namespace {

// The prometheus-cpp family behind a Family<T>, registered in `registry`. prometheus-cpp
// returns the existing family for a name registered before with the same type.
template <typename Metric>
prometheus::Family<Metric>& Register(prometheus::Registry& registry, const std::string& name,
                                     const std::string& help) {
  if constexpr (std::is_same_v<Metric, prometheus::Counter>) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
  } else if constexpr (std::is_same_v<Metric, prometheus::Gauge>) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
  } else {
    return prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
  }
}

template <typename T>
prometheus::MetricType TypeOf(const Family<T>* /*family*/ = nullptr) {
  if constexpr (std::is_same_v<T, Counter>) {
    return prometheus::MetricType::Counter;
  } else if constexpr (std::is_same_v<T, Gauge>) {
    return prometheus::MetricType::Gauge;
  } else {
    return prometheus::MetricType::Histogram;
  }
}

// What Registry's header asks of a declaration. prometheus-cpp checks names only when a child
// is added (and throws), accepts "le" as a label and writes the help text unescaped.
template <typename T>
bool ValidDeclaration(const std::string& name, const std::string& help,
                      const std::vector<std::string>& labels) {
  bool ok = prometheus::CheckMetricName(name) && help.find_first_of("\\\n") == std::string::npos;
  for (const auto& label : labels) ok = ok && prometheus::CheckLabelName(label) && label != "le";
  if (TypeOf<T>() == prometheus::MetricType::Counter) ok = ok && name.ends_with("_total");
  return ok;
}

}  // namespace

void Counter::SetCumulative(double v) {
  std::lock_guard<std::mutex> guard(mu_);
  const double current = impl_.Value();
  if (v > current) impl_.Increment(v - current);
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
    log::Error("metric used with the wrong number of label values",
               {{"metric", impl_.GetName()}, {"want", labels_.size()}, {"got", key.size()}});
    key.resize(labels_.size());
    it = children_.find(key);
    if (it != children_.end()) return *it->second;
  }
  prometheus::Labels labels;
  for (size_t i = 0; i < labels_.size(); ++i) labels.emplace(labels_[i], key[i]);
  Child& child = children_[key];
  if constexpr (std::is_same_v<T, Counter>) {
    child.reset(new Counter(impl_.Add(labels)));
  } else if constexpr (std::is_same_v<T, Histogram>) {
    child = &impl_.Add(labels, bounds_);
  } else {
    child = &impl_.Add(labels);
  }
  return *child;
}

template <typename T>
void Family<T>::RemoveExcept(const std::set<std::vector<std::string>>& keep) {
  std::lock_guard<std::mutex> guard(mu_);
  for (auto it = children_.begin(); it != children_.end();) {
    if (keep.contains(it->first)) {
      ++it;
      continue;
    }
    if constexpr (std::is_same_v<T, Counter>) {
      impl_.Remove(&it->second->impl_);
    } else {
      impl_.Remove(it->second);
    }
    it = children_.erase(it);
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

template <typename T>
Family<T>& Registry::Add(const std::string& name, const std::string& help,
                         std::vector<std::string> labels, std::vector<double> bounds) {
  if (!ValidDeclaration<T>(name, help, labels)) {
    log::Error("invalid metric declaration", {{"metric", name}});
    std::abort();
  }
  std::lock_guard<std::mutex> guard(mu_);
  if (auto it = families_.find(name); it != families_.end()) {
    auto* same = std::get_if<std::unique_ptr<Family<T>>>(&it->second);
    if (same == nullptr || (*same)->labels_ != labels) {
      log::Error("metric declared twice, differently", {{"metric", name}});
      std::abort();
    }
    return **same;
  }
  auto& impl = Register<typename Family<T>::Metric>(registry_, name, help);
  auto* family = new Family<T>(impl, help, std::move(labels), std::move(bounds));
  families_.emplace(name, std::unique_ptr<Family<T>>(family));
  if (family->labels_.empty()) family->With({});
  return *family;
}

CounterFamily& Registry::AddCounter(const std::string& name, const std::string& help,
                                    std::vector<std::string> labels) {
  return Add<Counter>(name, help, std::move(labels));
}

GaugeFamily& Registry::AddGauge(const std::string& name, const std::string& help,
                                std::vector<std::string> labels) {
  return Add<Gauge>(name, help, std::move(labels));
}

HistogramFamily& Registry::AddHistogram(const std::string& name, const std::string& help,
                                        std::vector<std::string> labels,
                                        std::vector<double> bounds) {
  if (bounds.empty() || !std::is_sorted(bounds.begin(), bounds.end()) ||
      std::adjacent_find(bounds.begin(), bounds.end()) != bounds.end()) {
    log::Error("histogram bounds must increase strictly", {{"metric", name}});
    std::abort();
  }
  return Add<Histogram>(name, help, std::move(labels), std::move(bounds));
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
  std::vector<prometheus::MetricFamily> families = registry_.Collect();
  std::set<std::string> collected;
  for (const auto& family : families) collected.insert(family.name);
  {
    // prometheus-cpp leaves out a family without children; a declared one is listed anyway.
    std::lock_guard<std::mutex> guard(mu_);
    for (const auto& [name, declared] : families_) {
      if (collected.contains(name)) continue;
      std::visit(
          [&](const auto& family) {
            families.push_back({name, family->help_, TypeOf(family.get()), {}});
          },
          declared);
    }
  }
  // A stable order for readers and diffs; prometheus-cpp keeps children in a hash map.
  std::sort(families.begin(), families.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& family : families) {
    std::sort(family.metric.begin(), family.metric.end(),
              [](const auto& a, const auto& b) { return a.label < b.label; });
  }
  return prometheus::TextSerializer().Serialize(families);
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

}  // namespace tpujob::metrics
