#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "metrics/registry.h"

namespace tpujob::metrics {
namespace TPUJOB_TEST_NS {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsRegistryTest, CounterRendersHelpTypeAndLabelledSamples) {
  Registry r;
  auto& requests = r.AddCounter("demo_requests_total", "Requests served.", {"verb", "code"});
  requests.With({"POST", "500"}).Inc();
  requests.With({"POST", "500"}).Inc(-5);  // ignored: counters only go up
  requests.With({"GET", "200"}).Inc();
  requests.With({"GET", "200"}).Inc(2);
  // Values are matched to label names by position; children sort by label.
  EXPECT_EQ(r.Render(),
            "# HELP demo_requests_total Requests served.\n"
            "# TYPE demo_requests_total counter\n"
            "demo_requests_total{code=\"200\",verb=\"GET\"} 3\n"
            "demo_requests_total{code=\"500\",verb=\"POST\"} 1\n");
}

TEST(MetricsRegistryTest, LabelLessFamiliesStartAtZeroAndFamiliesSortByName) {
  Registry r;
  r.AddGauge("b_gauge", "B.");
  r.AddCounter("a_total", "A.");
  const std::string text = r.Render();
  EXPECT_EQ(text,
            "# HELP a_total A.\n# TYPE a_total counter\na_total 0\n"
            "# HELP b_gauge B.\n# TYPE b_gauge gauge\nb_gauge 0\n");
}

TEST(MetricsRegistryTest, FamilyWithLabelsAndNoChildrenRendersOnlyItsHeader) {
  Registry r;
  r.AddCounter("x_total", "X.", {"reason"});
  EXPECT_EQ(r.Render(), "# HELP x_total X.\n# TYPE x_total counter\n");
}

TEST(MetricsRegistryTest, GaugeRendersItsValue) {
  Registry r;
  auto& g = r.AddGauge("queue_length", "Waiting.").With({});
  g.Set(2.5);
  EXPECT_THAT(r.Render(), HasSubstr("\nqueue_length 2.5\n"));
}

TEST(MetricsRegistryTest, RemoveExceptDropsTheSeriesNotKept) {
  Registry r;
  auto& gauges = r.AddGauge("job_ratio", "G.", {"job"});
  auto& counters = r.AddCounter("job_things_total", "C.", {"job"});
  for (const char* job : {"a", "b", "c"}) {
    gauges.With({job}).Set(1);
    counters.With({job}).Inc();
  }
  gauges.RemoveExcept({{"b"}});
  counters.RemoveExcept({{"a"}, {"c"}});
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("job_ratio{job=\"b\"} 1"));
  EXPECT_THAT(text, Not(HasSubstr("job_ratio{job=\"a\"}")));
  EXPECT_THAT(text, Not(HasSubstr("job_ratio{job=\"c\"}")));
  EXPECT_THAT(text, HasSubstr("job_things_total{job=\"c\"} 1"));
  EXPECT_THAT(text, Not(HasSubstr("job_things_total{job=\"b\"}")));
  // A removed series starts again from zero when it is used again.
  EXPECT_EQ(gauges.With({"a"}).Value(), 0);
}

TEST(MetricsRegistryTest, WithReturnsTheSameChildForTheSameValues) {
  Registry r;
  auto& counters = r.AddCounter("same_child_total", "C.", {"a"});
  auto& gauges = r.AddGauge("same_child", "G.", {"a"});
  auto& histograms = r.AddHistogram("same_child_seconds", "H.", {"a"}, {1});
  EXPECT_EQ(&counters.With({"x"}), &counters.With(std::vector<std::string>{"x"}));
  EXPECT_NE(&counters.With({"x"}), &counters.With({"y"}));
  EXPECT_EQ(&gauges.With({"x"}), &gauges.With({"x"}));
  EXPECT_EQ(&histograms.With({"x"}), &histograms.With({"x"}));
}

TEST(MetricsRegistryTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Registry r;
  auto& h = r.AddHistogram("latency_seconds", "Latency.", {"op"}, {0.1, 1});
  h.With({"get"}).Observe(0.05);
  h.With({"get"}).Observe(0.1);  // on the bound: counted in le="0.1"
  h.With({"get"}).Observe(0.5);
  h.With({"get"}).Observe(7);
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("# HELP latency_seconds Latency.\n"
                              "# TYPE latency_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr("latency_seconds_bucket{op=\"get\",le=\"0.1\"} 2\n"
                              "latency_seconds_bucket{op=\"get\",le=\"1\"} 3\n"
                              "latency_seconds_bucket{op=\"get\",le=\"+Inf\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("latency_seconds_sum{op=\"get\"} 7.65\n"));
  EXPECT_THAT(text, HasSubstr("latency_seconds_count{op=\"get\"} 4\n"));
}

TEST(MetricsRegistryTest, CollectorsRunBeforeEveryRenderUntilRemoved) {
  Registry r;
  auto& g = r.AddGauge("depth", "Depth.").With({});
  int calls = 0;
  const int id = r.AddCollector([&] { g.Set(++calls); });
  EXPECT_THAT(r.Render(), HasSubstr("\ndepth 1\n"));
  EXPECT_THAT(r.Render(), HasSubstr("\ndepth 2\n"));
  r.RemoveCollector(id);
  EXPECT_THAT(r.Render(), HasSubstr("\ndepth 2\n"));
  EXPECT_EQ(calls, 2);
}

TEST(MetricsRegistryTest, SetCumulativeNeverLowersACounter) {
  Registry r;
  auto& c = r.AddCounter("adds_total", "Adds.").With({});
  c.SetCumulative(10);
  c.SetCumulative(4);
  EXPECT_DOUBLE_EQ(c.Value(), 10);
  c.SetCumulative(12.5);
  EXPECT_DOUBLE_EQ(c.Value(), 12.5);
  EXPECT_THAT(r.Render(), HasSubstr("\nadds_total 12.5\n"));
}

TEST(MetricsRegistryTest, ConcurrentSetCumulativeNeverOvershoots) {
  Registry r;
  auto& c = r.AddCounter("copied_total", "Copied.").With({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 1; i <= 10000; ++i) c.SetCumulative(i);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_DOUBLE_EQ(c.Value(), 10000);
}

TEST(MetricsRegistryTest, RedeclaringTheSameFamilyReturnsIt) {
  Registry r;
  auto& first = r.AddCounter("same_total", "Same.", {"a"});
  auto& second = r.AddCounter("same_total", "Same.", {"a"});
  EXPECT_EQ(&first, &second);
}

TEST(MetricsRegistryDeathTest, RejectsInvalidDeclarations) {
  EXPECT_DEATH(Registry().AddCounter("no_suffix", "Bad."), "");
  EXPECT_DEATH(Registry().AddGauge("1starts_with_digit", "Bad."), "");
  EXPECT_DEATH(Registry().AddGauge("ok", "Bad.", {"le"}), "");
  EXPECT_DEATH(Registry().AddGauge("ok", "Bad.", {"__reserved"}), "");
  EXPECT_DEATH(Registry().AddGauge("ok", "Two\nlines."), "");
  EXPECT_DEATH(Registry().AddGauge("ok", "Back\\slash."), "");
  EXPECT_DEATH(Registry().AddHistogram("h", "Bad.", {}, {1, 1}), "");
  EXPECT_DEATH(Registry().AddHistogram("h", "Bad.", {}, {}), "");
}

TEST(MetricsRegistryDeathTest, RejectsARedeclarationThatDiffers) {
  EXPECT_DEATH(
      {
        Registry r;
        r.AddCounter("twice_total", "Twice.", {"a"});
        r.AddCounter("twice_total", "Twice.", {"b"});
      },
      "");
  EXPECT_DEATH(
      {
        Registry r;
        r.AddGauge("twice", "Twice.");
        r.AddHistogram("twice", "Twice.", {});
      },
      "");
}

TEST(MetricsRegistryTest, WrongNumberOfLabelValuesIsPaddedNotFatal) {
  Registry r;
  auto& f = r.AddCounter("pad_total", "Pad.", {"a", "b"});
  f.With({"x"}).Inc();
  f.With({"x", "y", "z"}).Inc();
  EXPECT_THAT(r.Render(), HasSubstr("pad_total{a=\"x\",b=\"\"} 1\n"));
  EXPECT_THAT(r.Render(), HasSubstr("pad_total{a=\"x\",b=\"y\"} 1\n"));
}

TEST(MetricsRegistryTest, ConcurrentUpdatesAreNotLost) {
  Registry r;
  auto& c = r.AddCounter("c_total", "C.", {"t"});
  auto& h = r.AddHistogram("h_seconds", "H.", {}, {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.With({"same"}).Inc();
        h.With({}).Observe(0.5);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_DOUBLE_EQ(c.With({"same"}).Value(), 40000);
  EXPECT_EQ(h.With({}).Collect().histogram.sample_count, 40000u);
}

TEST(MetricsRegistryTest, ProcessMetricsReadProc) {
  Registry r;
  AddProcessMetrics(r);
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE process_resident_memory_bytes gauge\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter\n"));
  EXPECT_THAT(text, Not(HasSubstr("process_resident_memory_bytes 0\n")));
  EXPECT_THAT(text, Not(HasSubstr("process_start_time_seconds 0\n")));
  EXPECT_THAT(text, Not(HasSubstr("process_open_fds 0\n")));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::metrics
