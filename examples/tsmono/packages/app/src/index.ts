import { report } from "report";
import { repeat } from "strings";

export function main(): string {
  return [repeat("=", 12), ...report({ build: [2, 4], test: [1] })].join("\n");
}
