// Registry: counters, gauges and histograms with labels, kept and exposed by prometheus-cpp
// (prometheus::Registry, rendered by prometheus::TextSerializer in the text format 0.0.4).
//
// This is a thin layer over prometheus-cpp that keeps the operator's declarations short:
//  - a family is declared once with its name, help text and label NAMES, and a child is picked
//    by label VALUES in that order (prometheus-cpp takes a name-to-value map on every use);
//  - a declaration is checked when it is made, and a bad one aborts (a programming error);
//  - collectors copy values kept elsewhere (queue depth, cache sizes) into gauges before every
//    render;
//  - a declared family is listed in the exposition (its HELP and TYPE lines) even before it has
//    a child, so dashboards and alerts find every name from the start; prometheus-cpp alone
//    leaves such a family out.
//
//   auto& requests = registry.AddCounter("tpujob_api_requests_total", "API requests.",
//                                        {"verb", "code"});
//   requests.With({"GET", "200"}).Inc();
//
// A child is created on first use and kept for the life of the registry (children are never
// removed, so a reference to one stays valid and updates need no lookup).
//
// Thread-safety: every method may be called from any thread. Updates of a child are those of
// prometheus-cpp (atomic for counters and gauges, a lock per histogram).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_type.h>
#include <prometheus/registry.h>

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace tpujob::metrics {

// A counter child. prometheus::Counter only adds, so this adds SetCumulative on top of it.
class Counter {
 public:
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Inc(double v = 1) { impl_.Increment(v); }  // v < 0 is ignored: a counter only goes up
  // Copies a cumulative count kept elsewhere (a work queue's adds). Never lowers the value:
  // a smaller `v` than the current value is ignored.
  void SetCumulative(double v);
  double Value() const { return impl_.Value(); }

 private:
  template <typename T>
  friend class Family;
  explicit Counter(prometheus::Counter& impl) : impl_(impl) {}
  prometheus::Counter& impl_;
  std::mutex mu_;  // makes SetCumulative's read and add one step
};

// Gauges (Set, Increment, Decrement, Value) and histograms (Observe) are prometheus-cpp's own.
using Gauge = prometheus::Gauge;
using Histogram = prometheus::Histogram;

// Default buckets for latencies in seconds: 1 ms to 60 s.
std::vector<double> LatencyBuckets();
// `count` buckets starting at `start`, each `factor` times the previous.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// One metric family: its label names and its children by label values.
template <typename T>
class Family {
 public:
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  // The child for these label values (in the order of the family's label names). A wrong number
  // of values is a programming error: it is logged and the values are padded or cut.
  T& With(std::initializer_list<std::string_view> values);
  T& With(const std::vector<std::string>& values);
  // Removes every child whose label values are not in `keep`: for per-object series (one per
  // job) whose objects go away.
  void RemoveExcept(const std::set<std::vector<std::string>>& keep);

 private:
  friend class Registry;
  // The prometheus-cpp type behind T.
  using Metric = std::conditional_t<std::is_same_v<T, Counter>, prometheus::Counter, T>;
  // Counters own their wrapper; gauges and histograms are prometheus-cpp's children themselves.
  using Child = std::conditional_t<std::is_same_v<T, Counter>, std::unique_ptr<Counter>, T*>;

  Family(prometheus::Family<Metric>& impl, std::string help, std::vector<std::string> labels,
         std::vector<double> bounds)
      : impl_(impl),
        help_(std::move(help)),
        labels_(std::move(labels)),
        bounds_(std::move(bounds)) {}

  prometheus::Family<Metric>& impl_;
  const std::string help_;
  const std::vector<std::string> labels_;
  const std::vector<double> bounds_;  // histograms only
  std::mutex mu_;
  std::map<std::vector<std::string>, Child> children_;  // guarded by mu_
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Names and label names must be valid Prometheus names (labels: no colon, no leading "__",
  // not "le"); a counter's name ends in _total; the help text is one line without backslashes
  // (prometheus-cpp writes it as it is). Declaring a name twice returns the first family when
  // the type and label names match, and aborts otherwise. A bad declaration aborts.
  CounterFamily& AddCounter(const std::string& name, const std::string& help,
                            std::vector<std::string> labels = {});
  GaugeFamily& AddGauge(const std::string& name, const std::string& help,
                        std::vector<std::string> labels = {});
  // `bounds`: the buckets' upper bounds, strictly increasing; +Inf is implicit.
  HistogramFamily& AddHistogram(const std::string& name, const std::string& help,
                                std::vector<std::string> labels,
                                std::vector<double> bounds = LatencyBuckets());

  // Called before every render, in the order added, to copy in values kept elsewhere. Returns
  // an id for RemoveCollector, which an owner calls before what the collector reads goes away;
  // it waits for a render in progress.
  int AddCollector(std::function<void()> collect);
  void RemoveCollector(int id);

  // Runs the collectors, then returns the text exposition of every declared family, sorted by
  // name, children sorted by label. A label-less family always has its one child (from 0); a
  // family with labels and no child yet shows its HELP and TYPE lines only.
  std::string Render();

 private:
  using AnyFamily = std::variant<std::unique_ptr<CounterFamily>, std::unique_ptr<GaugeFamily>,
                                 std::unique_ptr<HistogramFamily>>;
  // Declares (or returns, when declared the same way before) a family of type T.
  template <typename T>
  Family<T>& Add(const std::string& name, const std::string& help, std::vector<std::string> labels,
                 std::vector<double> bounds = {});

  prometheus::Registry registry_;
  std::mutex mu_;
  std::map<std::string, AnyFamily> families_;        // guarded by mu_
  std::mutex collect_mu_;                            // held while collectors run, and to remove one
  std::map<int, std::function<void()>> collectors_;  // guarded by collect_mu_
  int next_collector_ = 0;                           // guarded by collect_mu_
};

// The process-wide registry the operator exposes on /metrics.
Registry& DefaultRegistry();

// process_resident_memory_bytes, process_cpu_seconds_total, process_start_time_seconds and
// process_open_fds, read from /proc at every render.
void AddProcessMetrics(Registry& registry);

}  // namespace tpujob::metrics
