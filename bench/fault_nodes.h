// The nodes the fault scenarios (fault-latency, reissue, in-place, slice-recovery) run their
// jobs on, and the writes that play a node's faults and repairs.
//
// Contract:
//   1. CreateFaultNodes makes `count` KWOK TPU nodes `prefix`-node-0.. of 4 chips, in one pool
//      named `prefix`, of an accelerator no other scenario's job asks for, labelled
//      kBenchNodesLabel=`prefix`, and returns once KWOK has them all Ready and the node
//      controller has lifted its node.kubernetes.io/not-ready taint; on failure it says
//      why and removes them again.
//   2. A fault is a node condition written as node-problem-detector writes it (a strategic merge
//      on the status subresource, the conditions KWOK keeps left alone); a repair writes it
//      False again and undoes the operator's cordon as a person would.
#pragma once

#include <string>
#include <string_view>

#include "common.h"

namespace tpujob::bench {

inline constexpr std::string_view kBenchNodesLabel = "tpujob.dev/bench-nodes";

// The accelerator and topology of a scenario's nodes: "tpu-`prefix`", 2 x 2W for W workers of
// 4 chips each.
std::string FaultAccelerator(const std::string& prefix);
std::string FaultTopology(int workers);

bool CreateFaultNodes(kube::Client& client, const std::string& prefix,
                      const std::string& accelerator, const std::string& topology, int count);

// Deletes the nodes CreateFaultNodes made.
void DeleteFaultNodes(kube::Client& client, const std::string& prefix, int count);

// Writes `condition`=`status` on `node` with `reason` and `message`.
kube::Status WriteNodeCondition(kube::Client& client, const std::string& node,
                                const std::string& condition, const std::string& status,
                                const std::string& reason, const std::string& message);

// Writes the hardware fault `condition`=True on `node`.
kube::Status WriteNodeFault(kube::Client& client, const std::string& node,
                            const std::string& condition);

// Undoes the operator's cordon of `node` the way a person would after a repair: schedulable
// again, without the tpujob.dev/faulty taint and without the operator's annotations (which would
// otherwise make it treat the next fault there as the same evidence).
kube::Status UncordonNode(kube::Client& client, const std::string& node);

}  // namespace tpujob::bench
