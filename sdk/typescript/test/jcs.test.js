// RFC 8785 known answers: the RFC's own examples, and documents canonicalized by the
// Python `rfc8785` package that the server signs with (fixtures/jcs-python.json).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import { CanonicalizationError, canonicalize, canonicalizeToBytes } from "../dist/index.js";

const fixture = (name) => JSON.parse(readFileSync(new URL(`fixtures/${name}`, import.meta.url), "utf8"));

describe("RFC 8785 examples", () => {
  test("§3.2.2 sample: numbers, strings and literals", () => {
    const input = JSON.parse(
      '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],' +
        '"string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",' +
        '"literals": [null, true, false]}',
    );
    assert.equal(
      canonicalize(input),
      '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],' +
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
    );
  });

  test("§3.2.3 sorting by UTF-16 code units", () => {
    const input = JSON.parse(
      '{"\\u20ac": "Euro Sign", "\\r": "Carriage Return", "\\ufb33": "Hebrew Letter Dalet With Dagesh",' +
        '"1": "One", "\\ud83d\\ude00": "Emoji: Grinning Face", "\\u0080": "Control",' +
        '"\\u00f6": "Latin Small Letter O With Diaeresis"}',
    );
    // (Object.keys would list "1" first: integer-like names; read the text instead.)
    const names = [...canonicalize(input).matchAll(/"([^"]*)":/g)].map((m) => JSON.parse(`"${m[1]}"`));
    assert.deepEqual(names, ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\ud83d\ude00", "\ufb33"]);
  });

  test("§3.2.4 UTF-8 output of the sorting example", () => {
    const bytes = canonicalizeToBytes({ "\u20ac": "Euro Sign" });
    assert.equal(bytes.toString("hex"), "7b22e282ac223a224575726f205369676e227d");
  });

  const appendixB = [
    ["0000000000000000", "0"],
    ["8000000000000000", "0"],
    ["0000000000000001", "5e-324"],
    ["8000000000000001", "-5e-324"],
    ["7fefffffffffffff", "1.7976931348623157e+308"],
    ["ffefffffffffffff", "-1.7976931348623157e+308"],
    ["4340000000000000", "9007199254740992"],
    ["c340000000000000", "-9007199254740992"],
    ["4430000000000000", "295147905179352830000"],
    ["44b52d02c7e14af5", "9.999999999999997e+22"],
    ["44b52d02c7e14af6", "1e+23"],
    ["44b52d02c7e14af7", "1.0000000000000001e+23"],
    ["444b1ae4d6e2ef4e", "999999999999999700000"],
    ["444b1ae4d6e2ef4f", "999999999999999900000"],
    ["444b1ae4d6e2ef50", "1e+21"],
    ["3eb0c6f7a0b5ed8c", "9.999999999999997e-7"],
    ["3eb0c6f7a0b5ed8d", "0.000001"],
    ["41b3de4355555553", "333333333.3333332"],
    ["41b3de4355555554", "333333333.33333325"],
    ["41b3de4355555555", "333333333.3333333"],
    ["41b3de4355555556", "333333333.3333334"],
    ["41b3de4355555557", "333333333.33333343"],
    ["becbf647612f3696", "-0.0000033333333333333333"],
    ["43143ff3c1cb0959", "1424953923781206.2"],
  ];
  test("Appendix B number serialization", () => {
    for (const [bits, expected] of appendixB) {
      const value = Buffer.from(bits, "hex").readDoubleBE(0);
      assert.equal(canonicalize(value), expected, `IEEE 754 ${bits}`);
    }
  });
});

describe("agreement with the Python rfc8785 package", () => {
  const cases = fixture("jcs-python.json");
  test(`${cases.length} generated documents canonicalize byte for byte alike`, () => {
    for (const { input, canonical } of cases) {
      assert.equal(canonicalize(JSON.parse(input)), canonical, input);
    }
  });
});

describe("what RFC 8785 refuses", () => {
  for (const [name, value] of [
    ["NaN", NaN],
    ["Infinity", Infinity],
    ["a BigInt", 10n],
    ["a lone high surrogate", "a\ud800"],
    ["a lone low surrogate in a name", { "\udc00": 1 }],
  ]) {
    test(`${name} is a CanonicalizationError`, () => {
      assert.throws(() => canonicalize(value), CanonicalizationError);
    });
  }

  test("a cycle is a CanonicalizationError", () => {
    const cyclic = { a: [] };
    cyclic.a.push(cyclic);
    assert.throws(() => canonicalize(cyclic), CanonicalizationError);
  });

  test("a surrogate pair is fine", () => {
    assert.equal(canonicalize("\ud83d\ude00"), '"\ud83d\ude00"');
  });
});

describe("JSON.stringify semantics for JavaScript values", () => {
  test("undefined members are left out, undefined array items become null", () => {
    assert.equal(canonicalize({ b: undefined, a: [undefined, () => 1], c: 1 }), '{"a":[null,null],"c":1}');
  });

  test("toJSON is honoured (a Date becomes its ISO string)", () => {
    assert.equal(canonicalize({ at: new Date(0) }), '{"at":"1970-01-01T00:00:00.000Z"}');
  });

  test("the result equals the canonical form of what JSON.stringify sends", () => {
    const value = { z: 1.5, y: [true, null, "\u2028"], x: { "\u00e9": -0, b: 1e-7 }, w: new Date(1e12) };
    assert.equal(canonicalize(value), canonicalize(JSON.parse(JSON.stringify(value))));
  });

  test("duplicate-free shared references are not cycles", () => {
    const shared = { k: 1 };
    assert.equal(canonicalize({ a: shared, b: shared }), '{"a":{"k":1},"b":{"k":1}}');
  });
});
