/** A mistake in how a command was called or configured (the CLI exits 2). */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}
