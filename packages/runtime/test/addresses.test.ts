// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { inCidr, isCidr, slotLink } from "../src/network/addresses.js";

test("isCidr takes dotted-decimal addresses and CIDRs only", () => {
  for (const ok of ["10.0.0.0/8", "1.2.3.4", "198.51.100.10/32", "0.0.0.0/0", "255.255.255.255"]) assert.equal(isCidr(ok), true, ok);
  for (const bad of ["0x1.2.3.4", "1e2.1.1.1", " 1.2.3.4", "1.2.3.4/", "1.2.3.4/33", "1.2.3.4/1e1", "1.2.3.4/5/6", "300.1.1.1", "1.2.3", "example.com", ""]) {
    assert.equal(isCidr(bad), false, JSON.stringify(bad));
  }
});

test("inCidr and slotLink", () => {
  assert.equal(inCidr("100.96.3.2", "100.64.0.0/10"), true);
  assert.equal(inCidr("100.128.0.1", "100.64.0.0/10"), false);
  assert.deepEqual(slotLink("100.96.0.0/16", 1), { host: "100.96.0.5", guest: "100.96.0.6", cidr: "100.96.0.4/30" });
});
