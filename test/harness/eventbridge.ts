// EC2 events as EventBridge delivers them to an SQS queue (the body of each message), for tests
// of the AWS interruption queue. The shapes are AWS's; the ids are random.

import { REGION } from './ec2cloud.js';

/** The account of the EC2 emulator (moto's default). */
export const ACCOUNT = '123456789012';

/** An EventBridge event from aws.ec2 about one instance. */
export function ec2Event(
  detailType: string,
  instanceId: string,
  detail: Record<string, unknown>,
  at = new Date(),
): string {
  return JSON.stringify({
    version: '0',
    id: `${Math.random().toString(16).slice(2)}-1428-4cd3-a780-95db273d1602`,
    'detail-type': detailType,
    source: 'aws.ec2',
    account: ACCOUNT,
    time: at.toISOString().replace(/\.\d{3}Z$/, 'Z'),
    region: REGION,
    resources: [`arn:aws:ec2:${REGION}:${ACCOUNT}:instance/${instanceId}`],
    detail: { 'instance-id': instanceId, ...detail },
  });
}

/** EC2's two-minute warning before it reclaims a Spot instance. */
export const spotWarning = (id: string, at?: Date): string =>
  ec2Event('EC2 Spot Instance Interruption Warning', id, { 'instance-action': 'terminate' }, at);

/** EC2's rebalance recommendation: the instance is at elevated risk of interruption. */
export const rebalanceRecommendation = (id: string, at?: Date): string =>
  ec2Event('EC2 Instance Rebalance Recommendation', id, {}, at);

/** An instance state change (stopping, stopped, shutting-down, terminated, …). */
export const stateChange = (id: string, state: string): string =>
  ec2Event('EC2 Instance State-change Notification', id, { state });
