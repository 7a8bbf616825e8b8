// What a cloud tells the manager about one of its VMs out of band (an addition to MCM's driver
// calls): the VM is about to be interrupted, it is advised to move off, it stopped or ended
// without being asked to, or the cloud's health checks of it have failed for too long. A provider that receives such notices (the AWS provider reads them from
// an SQS queue fed by EventBridge) hands each to the manager's sink, which records on the VM's
// Machine what follows from it; the provider acknowledges the notice to its cloud only once the
// sink has answered, so a notice is never lost to a restart.

/** What a notice says about the VM. */
export const VmNoticeKind = {
  /** The VM goes soon (by `deadline` when known): replace the machine now, drain its node by then. */
  Interruption: 'interruption',
  /** The cloud advises moving off the VM; nothing is lost yet. */
  Rebalance: 'rebalance',
  /** The VM is stopping or stopped. */
  Stopped: 'stopped',
  /** The VM is shutting down or terminated. */
  Terminated: 'terminated',
  /**
   * The cloud's own health checks of the VM have failed for longer than the provider's timeout
   * (on AWS: an `impaired` instance or system status check): the VM is not coming back by itself.
   */
  Impaired: 'impaired',
  /**
   * The cloud's health checks of a VM it reported impaired pass again: the failure recorded for
   * it (`withdraws`), if its machine has not been failed for it yet, is withdrawn.
   */
  Recovered: 'recovered',
} as const;
export type VmNoticeKind = (typeof VmNoticeKind)[keyof typeof VmNoticeKind];

export interface VmNotice {
  kind: VmNoticeKind;
  /** The VM, as a providerID of the provider (matched on the VM it names, see vmKey). */
  providerID: string;
  /** Short CamelCase name of what the cloud sent (the event reason), e.g. SpotInterruption. */
  reason: string;
  /** What the cloud sent, for people (events, logs). */
  message: string;
  /** When the cloud sent it (ms since the epoch). */
  sentAt: number;
  /** Interruption: when the node must be drained by (the VM goes soon after); absent: no deadline. */
  deadline?: number;
  /** Rebalance: replace the machine as for an interruption without deadline (opted in). */
  replace?: boolean;
  /** Recovered: the reason of the failure notice it withdraws (e.g. InstanceImpaired). */
  withdraws?: string;
}

/**
 * What the sink did about a notice:
 * - acted: it recorded what the notice asks for on the machine (or its node);
 * - duplicate: that was recorded already (the same notice again, or one that asks for less);
 * - ignored: the machine is being deleted, or (stopped, terminated) the manager caused it;
 * - unknown: no machine has that VM.
 */
export type VmNoticeOutcome = 'acted' | 'duplicate' | 'ignored' | 'unknown';

/** Takes notices about VMs; throws when it could not record one (the notice is kept for a retry). */
export interface VmNoticeSink {
  handle(notice: VmNotice, signal?: AbortSignal): Promise<VmNoticeOutcome>;
}
