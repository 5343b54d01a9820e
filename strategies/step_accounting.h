// The loss bookkeeping every strategy shares: each step writes its loss and correct count into
// a device-side slot (no per-step read-back); Flush reads the slots into the totals and hands
// them out. This holds the slot index, the examples of the queued steps and the totals, so the
// three strategies fold and reset them the same way.
//
// Thread safety: none; owned by a Strategy, which is driven from one thread.
#ifndef VGPU_STRATEGIES_STEP_ACCOUNTING_H_
#define VGPU_STRATEGIES_STEP_ACCOUNTING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "vgpu/strategies/stage_chain.h"
#include "vgpu/strategies/strategy.h"

namespace vgpu {
namespace strategies {

class StepAccounting {
 public:
  // The slot the next step writes; equal to the number of queued steps.
  int slot() const { return slot_; }

  // A step on `rows` examples was queued into slot().
  void StepQueued(int rows) {
    ++slot_;
    pending_examples_ += rows;
  }

  // Adds the queued steps' slots of `last_stage` (the one computing the loss) to the totals.
  absl::Status ReadSlots(const ModelStage& last_stage) {
    return last_stage.AccumulateSlots(slot_, totals_.loss_sum, totals_.correct);
  }

  // ReadSlots of `chain`'s last stage, then every stage's stream drained, even after an error:
  // a failed step may still have copies queued that read the caller's inputs, which must not
  // happen once Flush returns. The first error.
  absl::Status ReadSlotsAndDrain(const StageChain& chain) {
    absl::Status status = ReadSlots(*chain.back());
    status.Update(chain.Synchronize());
    return status;
  }

  // Once the slots are read and the devices synchronised: the totals since the last call,
  // the queued examples included; slots and totals start again from zero.
  StepTotals TakeTotals() {
    totals_.examples += pending_examples_;
    pending_examples_ = 0;
    slot_ = 0;
    StepTotals out = totals_;
    totals_ = StepTotals();
    return out;
  }

 private:
  int slot_ = 0;
  int64_t pending_examples_ = 0;  // losses are in the slots until Flush reads them
  StepTotals totals_;
};

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_STEP_ACCOUNTING_H_
