// The messages of an EC2 interruption queue (pure parsing): EventBridge events that an SQS queue
// receives, one JSON event per message body. Four kinds concern a machine: a spot interruption
// warning (about two minutes before the instance goes), a rebalance recommendation (a spot
// instance at elevated risk), an instance state change (stopping, stopped, shutting-down,
// terminated) and an AWS Health scheduled change of an EC2 instance (retirement, maintenance, stop).
// Anything else on the queue is ignored; a body that is not such an event is malformed, with the
// reason. What is done about each kind is decided elsewhere; this module only says what arrived.
//
// Wire format: the EventBridge envelope (`version` "0", `id`, `detail-type`, `source`, `time`
// RFC 3339, `region`, `resources`, `detail`) and the detail fields named by AWS for each event.

/** What an interruption-queue message asks about. */
export const InterruptionKind = {
  /** Spot: the instance is reclaimed in about two minutes. */
  SpotInterruption: 'spot-interruption',
  /** Spot: the instance is at elevated risk of interruption. */
  RebalanceRecommendation: 'rebalance-recommendation',
  /** The instance is stopping or stopped. */
  InstanceStopped: 'instance-stopped',
  /** The instance is shutting down or terminated. */
  InstanceTerminated: 'instance-terminated',
  /** AWS Health: a scheduled change of the instance (retirement, maintenance, stop). */
  ScheduledChange: 'scheduled-change',
} as const;
export type InterruptionKind = (typeof InterruptionKind)[keyof typeof InterruptionKind];

export const EVENT_SOURCE_EC2 = 'aws.ec2';
export const EVENT_SOURCE_HEALTH = 'aws.health';

/** The EventBridge detail-types of the four kinds, as AWS writes them. */
export const DetailType = {
  SpotInterruption: 'EC2 Spot Instance Interruption Warning',
  RebalanceRecommendation: 'EC2 Instance Rebalance Recommendation',
  StateChange: 'EC2 Instance State-change Notification',
  Health: 'AWS Health Event',
} as const;

/** A message about instances. */
export interface InterruptionMessage {
  kind: InterruptionKind;
  /** The EventBridge event id (duplicates of one event share it). */
  id: string;
  /** When AWS emitted the event (ms since the epoch). */
  time: number;
  region: string;
  /** The instances the event is about (at least one). */
  instanceIds: string[];
  /** Spot interruption: what happens to the instance (hibernate, stop, terminate). */
  instanceAction?: string;
  /** State change: the new state. */
  state?: string;
  /** Health: the event's type code (e.g. AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED) and its start, as sent. */
  eventTypeCode?: string;
  startTime?: string;
}

export type ParsedMessage =
  | { result: 'message'; message: InterruptionMessage }
  /** A well-formed event this queue does not act on (another source or type, a state such as running). */
  | { result: 'ignored'; reason: string }
  /** Not an event of the queue's kinds at all: the reason says what is wrong (never the body). */
  | { result: 'malformed'; reason: string };

const INSTANCE_ID = /^i-[0-9a-f]{8,17}$/;
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

const STOPPED_STATES = new Set(['stopping', 'stopped']);
const TERMINATED_STATES = new Set(['shutting-down', 'terminated']);

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function str(o: Record<string, unknown>, key: string): string | undefined {
  const v = o[key];
  return typeof v === 'string' ? v : undefined;
}

/** The instance id of an EC2 event's detail, or why there is none. */
function instanceOf(detail: Record<string, unknown>): string | { malformed: string } {
  const id = str(detail, 'instance-id');
  if (id === undefined) return { malformed: 'detail.instance-id is missing' };
  if (!INSTANCE_ID.test(id))
    return { malformed: `detail.instance-id ${JSON.stringify(id.slice(0, 40))} is not an instance id` };
  return id;
}

/** Parses one message body of the interruption queue. */
export function parseInterruptionMessage(body: string): ParsedMessage {
  let event: unknown;
  try {
    event = JSON.parse(body);
  } catch {
    return { result: 'malformed', reason: `the body is not JSON (${body.length} bytes)` };
  }
  if (!isRecord(event)) return { result: 'malformed', reason: 'the body is not a JSON object' };
  const version = str(event, 'version');
  const source = str(event, 'source');
  const detailType = str(event, 'detail-type');
  const time = str(event, 'time');
  const detail = event.detail;
  if (source === undefined || detailType === undefined)
    return { result: 'malformed', reason: 'not an EventBridge event (no source or detail-type)' };
  if (version !== '0')
    return { result: 'malformed', reason: `event version ${JSON.stringify(version ?? null)}, expected "0"` };
  if (time === undefined || !RFC3339.test(time) || Number.isNaN(Date.parse(time)))
    return { result: 'malformed', reason: 'event time missing or not RFC 3339' };
  if (!isRecord(detail)) return { result: 'malformed', reason: 'event detail missing or not an object' };
  const base = { id: str(event, 'id') ?? '', time: Date.parse(time), region: str(event, 'region') ?? '' };

  if (source === EVENT_SOURCE_EC2) {
    switch (detailType) {
      case DetailType.SpotInterruption:
      case DetailType.RebalanceRecommendation: {
        const id = instanceOf(detail);
        if (typeof id !== 'string') return { result: 'malformed', reason: `${detailType}: ${id.malformed}` };
        if (detailType === DetailType.RebalanceRecommendation)
          return {
            result: 'message',
            message: { ...base, kind: InterruptionKind.RebalanceRecommendation, instanceIds: [id] },
          };
        const action = str(detail, 'instance-action');
        return {
          result: 'message',
          message: {
            ...base,
            kind: InterruptionKind.SpotInterruption,
            instanceIds: [id],
            ...(action === undefined ? {} : { instanceAction: action }),
          },
        };
      }
      case DetailType.StateChange: {
        const id = instanceOf(detail);
        if (typeof id !== 'string') return { result: 'malformed', reason: `${detailType}: ${id.malformed}` };
        const state = str(detail, 'state')?.toLowerCase();
        if (state === undefined)
          return { result: 'malformed', reason: `${detailType}: detail.state is missing` };
        const kind = STOPPED_STATES.has(state)
          ? InterruptionKind.InstanceStopped
          : TERMINATED_STATES.has(state)
            ? InterruptionKind.InstanceTerminated
            : undefined;
        if (kind === undefined) return { result: 'ignored', reason: `${detailType}: state ${state}` };
        return { result: 'message', message: { ...base, kind, instanceIds: [id], state } };
      }
      default:
        return { result: 'ignored', reason: `${source}: ${detailType}` };
    }
  }
  if (source === EVENT_SOURCE_HEALTH && detailType === DetailType.Health) {
    const service = str(detail, 'service');
    const category = str(detail, 'eventTypeCategory');
    if (service !== 'EC2' || category !== 'scheduledChange')
      return {
        result: 'ignored',
        reason: `${detailType}: service ${service ?? '-'}, category ${category ?? '-'}`,
      };
    const entities = Array.isArray(detail.affectedEntities) ? (detail.affectedEntities as unknown[]) : [];
    const ids = entities
      .map((e) => (isRecord(e) ? str(e, 'entityValue') : undefined))
      .filter((v): v is string => v !== undefined && INSTANCE_ID.test(v));
    if (ids.length === 0)
      return { result: 'ignored', reason: `${detailType}: no instance among its affected entities` };
    const code = str(detail, 'eventTypeCode');
    const start = str(detail, 'startTime');
    return {
      result: 'message',
      message: {
        ...base,
        kind: InterruptionKind.ScheduledChange,
        instanceIds: [...new Set(ids)],
        ...(code === undefined ? {} : { eventTypeCode: code }),
        ...(start === undefined ? {} : { startTime: start }),
      },
    };
  }
  return { result: 'ignored', reason: `${source}: ${detailType}` };
}
