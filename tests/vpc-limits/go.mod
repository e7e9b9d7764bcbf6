module karpenter-rs/tests/vpc-limits

go 1.26.6

require github.com/aws/amazon-vpc-resource-controller-k8s v1.8.2
