// Registry: counters, gauges and histograms with labels, rendered in the Prometheus text
// exposition format (version 0.0.4), as client_golang's registry does.
//
// A family is declared once with its name, help text and label names; a child is one label
// combination, created on first use and kept for the life of the registry (children are never
// removed, so a pointer to one stays valid and updates need no lookup).
//
//   auto& requests = registry.AddCounter("tpujob_api_requests_total", "API requests.",
//                                        {"verb", "code"});
//   requests.With({"GET", "200"}).Inc();
//
// Values that live elsewhere (queue depth, cache sizes) are copied in by collectors, which the
// registry calls before every render.
//
// Thread-safety: every method may be called from any thread. Counter, Gauge and Histogram
// updates are lock-free or take only the child's own lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tpujob::metrics {

class Counter {
 public:
  void Inc(double v = 1);  // v < 0 is ignored: a counter only goes up
  // Copies a cumulative count kept elsewhere (a work queue's adds). Never lowers the value.
  void SetCumulative(double v);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `bounds` are the upper bounds, strictly increasing; +Inf is implicit.
  explicit Histogram(const std::vector<double>* bounds);
  void Observe(double v);
  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Take() const;

 private:
  const std::vector<double>* bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> buckets_;  // non-cumulative, one per bound plus +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Default buckets for latencies in seconds: 1 ms to 60 s.
std::vector<double> LatencyBuckets();
// `count` buckets starting at `start`, each `factor` times the previous.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

enum class Type { kCounter, kGauge, kHistogram };

// One metric family: a name, help, label names and its children by label values.
template <typename T>
class Family {
 public:
  // The child for these label values (in the order of the family's label names). A wrong number
  // of values is a programming error: it is logged once and the values are padded or cut.
  T& With(std::initializer_list<std::string_view> values);
  T& With(const std::vector<std::string>& values);

 private:
  friend class Registry;
  Family(std::string name, std::string help, std::vector<std::string> labels, Type type,
         std::vector<double> bounds = {})
      : name_(std::move(name)),
        help_(std::move(help)),
        labels_(std::move(labels)),
        type_(type),
        bounds_(std::move(bounds)) {}
  std::string name_;
  std::string help_;
  std::vector<std::string> labels_;
  Type type_;
  std::vector<double> bounds_;  // histograms only
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Names and label names must match [a-zA-Z_:][a-zA-Z0-9_:]* (labels: no colon, no leading
  // "__"); a counter's name ends in _total. Declaring a name twice returns the first family
  // when the declaration matches and aborts otherwise (a programming error).
  CounterFamily& AddCounter(const std::string& name, const std::string& help,
                            std::vector<std::string> labels = {});
  GaugeFamily& AddGauge(const std::string& name, const std::string& help,
                        std::vector<std::string> labels = {});
  HistogramFamily& AddHistogram(const std::string& name, const std::string& help,
                                std::vector<std::string> labels,
                                std::vector<double> bounds = LatencyBuckets());

  // Called before every render, in the order added, to copy in values kept elsewhere. Returns
  // an id for RemoveCollector, which an owner calls before what the collector reads goes away;
  // it waits for a render in progress.
  int AddCollector(std::function<void()> collect);
  void RemoveCollector(int id);

  // The text exposition of every family, sorted by name; children sorted by label values.
  // A family without children renders its HELP and TYPE lines only (and a label-less family
  // always has its one child, starting at 0).
  std::string Render();

 private:
  struct Entry {
    Type type;
    std::unique_ptr<CounterFamily> counter;
    std::unique_ptr<GaugeFamily> gauge;
    std::unique_ptr<HistogramFamily> histogram;
  };
  void Check(const std::string& name, Type type, const std::vector<std::string>& labels);
  // Declares (or returns, when declared the same way before) the family kept in `slot`.
  template <typename T>
  Family<T>& Add(std::unique_ptr<Family<T>> Entry::*slot, Type type, const std::string& name,
                 const std::string& help, std::vector<std::string> labels,
                 std::vector<double> bounds = {});
  std::mutex mu_;
  std::map<std::string, Entry> families_;
  std::mutex collect_mu_;                            // held while collectors run, and to remove one
  std::map<int, std::function<void()>> collectors_;  // guarded by collect_mu_
  int next_collector_ = 0;                           // guarded by collect_mu_
};

// The process-wide registry the operator exposes on /metrics.
Registry& DefaultRegistry();

// process_resident_memory_bytes, process_cpu_seconds_total, process_start_time_seconds and
// process_open_fds, read from /proc at every render.
void AddProcessMetrics(Registry& registry);

// Escaping of the text format: label values escape \ " and newline; help escapes \ and newline.
std::string EscapeLabelValue(std::string_view value);
std::string EscapeHelp(std::string_view help);
// A sample value as the text format writes it: shortest round-trip form, +Inf, -Inf, NaN.
std::string FormatValue(double value);

}  // namespace tpujob::metrics
