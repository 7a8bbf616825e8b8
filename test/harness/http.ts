// Plain HTTP GETs of the processes the tests run (metrics, health checks).

import http from 'node:http';

/** GET url; rejects when there is no answer within timeoutMs. */
export function httpGetText(url: string, timeoutMs = 5000): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { timeout: timeoutMs }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, text });
      });
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url}: timeout`)));
    req.on('error', reject);
  });
}

/** The Prometheus text of a local process's /metrics, or '' when it does not answer. */
export async function metricsText(port: number, timeoutMs = 5000): Promise<string> {
  try {
    return (await httpGetText(`http://127.0.0.1:${port}/metrics`, timeoutMs)).text;
  } catch {
    return '';
  }
}
