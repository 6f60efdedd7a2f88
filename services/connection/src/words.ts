import { randomInt } from "node:crypto";
import { wordlist } from "@scure/bip39/wordlists/english.js";

/** A fresh random three-word local part from the BIP-39 English list (2048 words, a-z only). */
export function randomThreeWords(): string {
  return [0, 1, 2].map(() => wordlist[randomInt(wordlist.length)]).join(".");
}
