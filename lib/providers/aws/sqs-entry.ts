// The part of the AWS SDK the interruption queue runs (the SQS client and the three commands it
// sends), bundled by `npm run build` beside sdk-entry.ts into dist/lib/providers/aws/sdk-bundle/
// (hack/bundle-aws-sdk.mjs), sharing its chunks. interruption/queue.ts loads it when the queue is
// configured (--aws-interruption-queue); a manager without a queue never loads it.
//
// To send another SQS command: export it here, give InterruptionQueue (interruption/queue.ts) its
// method, add its case to the bundle's unit test (test/unit/providers/aws/sdk-bundle.test.ts).

export {
  ChangeMessageVisibilityCommand,
  DeleteMessageCommand,
  ReceiveMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
