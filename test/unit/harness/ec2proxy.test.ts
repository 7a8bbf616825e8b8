import http from 'node:http';
import type { AddressInfo } from 'node:net';

import { expect } from 'chai';

import { Ec2FaultProxy, sdkAttempt } from '../../harness/ec2proxy.js';

describe('EC2 fault proxy: repeated calls', () => {
  let upstream: http.Server;
  let proxy: Ec2FaultProxy;
  let endpoint = '';

  before(async () => {
    // Stands in for the emulator: every call succeeds with an empty EC2 answer.
    upstream = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/xml' });
        res.end('<Response/>');
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const port = (upstream.address() as AddressInfo).port;
    proxy = new Ec2FaultProxy(`http://127.0.0.1:${port}`);
    endpoint = await proxy.start();
  });

  after(async () => {
    await proxy.stop();
    upstream.closeAllConnections();
    await new Promise<void>((resolve) =>
      upstream.close(() => {
        resolve();
      }),
    );
  });

  const call = async (body: string, attempt?: number): Promise<void> => {
    const headers: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded' };
    if (attempt !== undefined) headers['amz-sdk-request'] = `attempt=${attempt}; max=5`;
    const res = await fetch(endpoint, { method: 'POST', headers, body });
    await res.text();
  };

  it('reads the attempt of the SDK header, 1 when there is none or it is garbled', () => {
    expect(sdkAttempt('attempt=3; max=5')).to.equal(3);
    expect(sdkAttempt(['attempt=2; max=3'])).to.equal(2);
    expect(sdkAttempt(undefined)).to.equal(1);
    expect(sdkAttempt('max=5')).to.equal(1);
    expect(sdkAttempt('attempt=0')).to.equal(1);
  });

  it('counts SDK retries by action and TerminateInstances by instance; resetCounts clears both', async () => {
    proxy.resetCounts();
    await call('Action=TerminateInstances&InstanceId.1=i-a&InstanceId.2=i-b', 1);
    await call('Action=TerminateInstances&InstanceId.1=i-a', 2);
    await call('Action=TerminateInstances&InstanceId.1=i-a');
    await call('Action=DescribeInstances', 1);
    await call('Action=DescribeInstances', 4);

    expect(proxy.calls.get('TerminateInstances')).to.equal(3);
    expect(Object.fromEntries(proxy.retried)).to.deep.equal({ TerminateInstances: 1, DescribeInstances: 1 });
    expect(Object.fromEntries(proxy.terminations)).to.deep.equal({ 'i-a': 3, 'i-b': 1 });

    proxy.resetCounts();
    expect(proxy.retried.size).to.equal(0);
    expect(proxy.terminations.size).to.equal(0);
  });
});
