"""A local SageMaker, SageMaker Runtime and CloudWatch that real boto3 talks to."""
