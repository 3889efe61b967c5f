import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "node_modules/", "bench/results/"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      // Every message from a wire or disk is parsed with a zod schema, never cast.
      "@typescript-eslint/no-explicit-any": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "no-restricted-syntax": [
        "error",
        {
          selector: "TSAsExpression > CallExpression[callee.object.name='JSON'][callee.property.name='parse']",
          message: "Parse with a zod schema from protocol/, never `JSON.parse(x) as T`.",
        },
      ],
      eqeqeq: ["error", "always", { null: "ignore" }],
    },
  },
  {
    files: ["turn/**/*.ts"],
    rules: {
      "no-restricted-imports": ["error", { patterns: ["../acp/*", "../daemon/*", "**/acp/*", "**/daemon/*"] }],
    },
  },
  {
    files: ["protocol/**/*.ts"],
    rules: {
      "no-restricted-imports": ["error", { paths: ["node:fs", "node:fs/promises", "node:net", "node:child_process"] }],
    },
  },
);
