import { expect } from 'chai';

import {
  InterruptionKind,
  parseInterruptionMessage,
} from '../../../../../lib/providers/aws/interruption/messages.js';

const TIME = '2026-11-28T02:00:00Z';

function event(
  source: string,
  detailType: string,
  detail: unknown,
  extra: Record<string, unknown> = {},
): string {
  return JSON.stringify({
    version: '0',
    id: '7bf73129-1428-4cd3-a780-95db273d1602',
    'detail-type': detailType,
    source,
    account: '123456789012',
    time: TIME,
    region: 'eu-west-1',
    resources: ['arn:aws:ec2:eu-west-1:123456789012:instance/i-1234567890abcdef0'],
    detail,
    ...extra,
  });
}

describe('interruption queue messages', () => {
  it('reads a spot interruption warning: the instance and its action', () => {
    const p = parseInterruptionMessage(
      event('aws.ec2', 'EC2 Spot Instance Interruption Warning', {
        'instance-id': 'i-1234567890abcdef0',
        'instance-action': 'terminate',
      }),
    );
    expect(p).to.deep.equal({
      result: 'message',
      message: {
        kind: InterruptionKind.SpotInterruption,
        id: '7bf73129-1428-4cd3-a780-95db273d1602',
        time: Date.parse(TIME),
        region: 'eu-west-1',
        instanceIds: ['i-1234567890abcdef0'],
        instanceAction: 'terminate',
      },
    });
  });

  it('reads a rebalance recommendation', () => {
    const p = parseInterruptionMessage(
      event('aws.ec2', 'EC2 Instance Rebalance Recommendation', { 'instance-id': 'i-0abcdef1' }),
    );
    expect(p).to.deep.include({ result: 'message' });
    if (p.result === 'message') {
      expect(p.message.kind).to.equal(InterruptionKind.RebalanceRecommendation);
      expect(p.message.instanceIds).to.deep.equal(['i-0abcdef1']);
    }
  });

  it('reads the state changes that end an instance, and ignores the others', () => {
    const change = (state: string): ReturnType<typeof parseInterruptionMessage> =>
      parseInterruptionMessage(
        event('aws.ec2', 'EC2 Instance State-change Notification', { 'instance-id': 'i-0abcdef1', state }),
      );
    for (const [state, kind] of [
      ['stopping', InterruptionKind.InstanceStopped],
      ['stopped', InterruptionKind.InstanceStopped],
      ['shutting-down', InterruptionKind.InstanceTerminated],
      ['terminated', InterruptionKind.InstanceTerminated],
      ['Terminated', InterruptionKind.InstanceTerminated],
    ] as const) {
      const p = change(state);
      expect(p.result, state).to.equal('message');
      if (p.result === 'message') expect(p.message.kind, state).to.equal(kind);
    }
    expect(change('running').result).to.equal('ignored');
    expect(change('pending').result).to.equal('ignored');
  });

  it('reads an AWS Health scheduled change of EC2 instances, and ignores other Health events', () => {
    const health = (detail: Record<string, unknown>): ReturnType<typeof parseInterruptionMessage> =>
      parseInterruptionMessage(event('aws.health', 'AWS Health Event', detail));
    const p = health({
      eventArn: 'arn:aws:health:eu-west-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x',
      service: 'EC2',
      eventTypeCode: 'AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED',
      eventTypeCategory: 'scheduledChange',
      startTime: 'Wed, 26 Jun 2019 15:00:00 GMT',
      affectedEntities: [
        { entityValue: 'i-0abcdef1', tags: {} },
        { entityValue: 'i-0abcdef2' },
        { entityValue: 'i-0abcdef1' },
      ],
    });
    expect(p.result).to.equal('message');
    if (p.result === 'message') {
      expect(p.message).to.deep.include({
        kind: InterruptionKind.ScheduledChange,
        instanceIds: ['i-0abcdef1', 'i-0abcdef2'],
        eventTypeCode: 'AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED',
        startTime: 'Wed, 26 Jun 2019 15:00:00 GMT',
      });
    }
    expect(
      health({
        service: 'EC2',
        eventTypeCategory: 'issue',
        affectedEntities: [{ entityValue: 'i-0abcdef1' }],
      }).result,
    ).to.equal('ignored');
    expect(health({ service: 'RDS', eventTypeCategory: 'scheduledChange' }).result).to.equal('ignored');
    expect(
      health({ service: 'EC2', eventTypeCategory: 'scheduledChange', affectedEntities: [] }).result,
    ).to.equal('ignored');
  });

  it('ignores other well-formed events', () => {
    expect(
      parseInterruptionMessage(event('aws.autoscaling', 'EC2 Instance-terminate Lifecycle Action', {}))
        .result,
    ).to.equal('ignored');
    expect(parseInterruptionMessage(event('aws.ec2', 'EBS Volume Notification', {})).result).to.equal(
      'ignored',
    );
  });

  it('calls malformed what is not such an event, with a reason and without repeating the body', () => {
    const cases: [string, string][] = [
      ['{"secret": "hunter2"', 'not JSON'],
      ['[1, 2]', 'not a JSON object'],
      [JSON.stringify({ hello: 'world' }), 'no source or detail-type'],
      [
        event(
          'aws.ec2',
          'EC2 Spot Instance Interruption Warning',
          { 'instance-id': 'i-0abcdef1' },
          { version: '1' },
        ),
        'version',
      ],
      [
        event(
          'aws.ec2',
          'EC2 Spot Instance Interruption Warning',
          { 'instance-id': 'i-0abcdef1' },
          { time: 'yesterday' },
        ),
        'RFC 3339',
      ],
      [event('aws.ec2', 'EC2 Spot Instance Interruption Warning', 'x'), 'detail missing'],
      [event('aws.ec2', 'EC2 Spot Instance Interruption Warning', {}), 'instance-id is missing'],
      [
        event('aws.ec2', 'EC2 Spot Instance Interruption Warning', { 'instance-id': 'vm-7' }),
        'not an instance id',
      ],
      [
        event('aws.ec2', 'EC2 Instance State-change Notification', { 'instance-id': 'i-0abcdef1' }),
        'state is missing',
      ],
    ];
    for (const [body, reason] of cases) {
      const p = parseInterruptionMessage(body);
      expect(p.result, body).to.equal('malformed');
      if (p.result === 'malformed') {
        expect(p.reason, body).to.include(reason);
        expect(p.reason, 'no user data in the reason').to.not.include('hunter2');
      }
    }
  });
});
