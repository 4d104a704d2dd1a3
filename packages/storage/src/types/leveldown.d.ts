/** The part of leveldown 6 (callback API) that LevelKvStore uses. */
declare module 'leveldown' {
  type Callback = (error: Error | undefined | null) => void;

  interface LevelDownBatchOp {
    type: 'put' | 'del';
    key: Buffer | string;
    value?: Buffer;
  }

  interface LevelDownIterator {
    next(callback: (error: Error | undefined | null, key?: string, value?: Buffer) => void): void;
    end(callback: Callback): void;
  }

  interface LevelDown {
    open(options: { createIfMissing?: boolean; errorIfExists?: boolean }, callback: Callback): void;
    close(callback: Callback): void;
    get(key: string, options: { asBuffer: true }, callback: (error: Error | undefined | null, value?: Buffer) => void): void;
    batch(ops: LevelDownBatchOp[], options: { sync: boolean }, callback: Callback): void;
    iterator(options: {
      gte: Buffer;
      lt: Buffer;
      keyAsBuffer: false;
      valueAsBuffer: true;
    }): LevelDownIterator;
  }

  function leveldown(location: string): LevelDown;
  export default leveldown;
}
