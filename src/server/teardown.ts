/**
 * What a server started, closed in reverse: each part registers its closer as
 * soon as it exists, and one run closes everything registered so far, last
 * first. The same stack serves a start that fails half-way and a stop, so the
 * two cannot disagree on what to close or in which order.
 */
export class Teardown {
  private readonly closers: { what: string; close: () => unknown }[] = [];

  /** Registers `close` (sync or async) to run before everything registered earlier. */
  defer(what: string, close: () => unknown): void {
    this.closers.push({ what, close });
  }

  /**
   * Runs the closers, last registered first, each once. A closer that throws
   * does not stop the others; the first such error is thrown at the end, with
   * what it was closing.
   */
  async run(): Promise<void> {
    let first: Error | undefined;
    for (let c = this.closers.pop(); c !== undefined; c = this.closers.pop()) {
      try {
        await c.close();
      } catch (err) {
        first ??= new Error(`closing ${c.what}: ${(err as Error)?.message ?? String(err)}`, { cause: err });
      }
    }
    if (first) throw first;
  }

  /**
   * Runs `step`; when it fails, closes everything registered so far and throws
   * the step's error (a closer's error then is attached as the `suppressed` cause).
   */
  async guard<T>(step: () => Promise<T>): Promise<T> {
    try {
      return await step();
    } catch (err) {
      await this.run().catch((closing: unknown) => {
        if (err instanceof Error && !('suppressed' in err)) Object.assign(err, { suppressed: closing });
      });
      throw err;
    }
  }
}
