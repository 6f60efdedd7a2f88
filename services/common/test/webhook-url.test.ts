import { describe, expect, it } from "@jest/globals";
import { WEBHOOK_URL_MAX_LENGTH, webhookUrlRefusal } from "../src/rules/webhook-url.js";

// The one webhook-address rule: the auth service at registration, the webhook service before each attempt.

describe("webhook address with insecure URLs off (the chart)", () => {
  it.each([
    ["not a url", /absolute URL/],
    ["/relative/hook", /absolute URL/],
    ["http://example.com/hook", /must use https/],
    ["ftp://example.com/hook", /must use https/],
    ["https://user:pw@example.com/hook", /credentials/],
    ["https://user@example.com/hook", /credentials/],
    [`https://example.com/${"a".repeat(WEBHOOK_URL_MAX_LENGTH)}`, /longer than 2048/],
    ["https://localhost/hook", /localhost/],
    ["https://LOCALHOST./hook", /localhost/],
    ["https://127.0.0.1/hook", /IP address/],
    ["https://10.1.2.3/hook", /IP address/],
    ["https://169.254.169.254/latest/meta-data", /IP address/],
    ["https://2130706433/hook", /IP address/],
    ["https://0x7f.1/hook", /IP address/],
    ["https://93.184.216.34/hook", /IP address/],
    ["https://[::1]/hook", /IP address/],
    ["https://[::ffff:127.0.0.1]/hook", /IP address/],
    ["https://[fd00:ec2::254]/hook", /IP address/],
    ["https://[2606:4700:4700::1111]/hook", /IP address/],
  ])("refuses %s", (url, reason) => {
    expect(webhookUrlRefusal(url, false)).toMatch(reason);
  });

  it.each([
    "https://example.com/hook",
    "https://hooks.example.com:8443/a/b?c=d",
    "https://1.example.com/hook",
    "https://xn--bcher-kva.example/hook",
  ])("accepts the named host %s", (url) => {
    expect(webhookUrlRefusal(url, false)).toBeUndefined();
  });
});

describe("webhook address with insecure URLs on (npm start, tests)", () => {
  it.each(["http://127.0.0.1:8080/hook", "http://localhost/hook", "https://[::1]/hook", "https://example.com/hook"])(
    "accepts %s",
    (url) => {
      expect(webhookUrlRefusal(url, true)).toBeUndefined();
    },
  );

  it.each([
    ["ftp://127.0.0.1/hook", /http or https/],
    ["http://user:pw@127.0.0.1/hook", /credentials/],
    ["nope", /absolute URL/],
  ])("still refuses %s", (url, reason) => {
    expect(webhookUrlRefusal(url, true)).toMatch(reason);
  });
});
