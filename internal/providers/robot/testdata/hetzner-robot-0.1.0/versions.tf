terraform {
  # Only built-in features: terraform_data and local-exec provisioners that run
  # `fulfiller robot`. No provider is downloaded.
  required_version = ">= 1.12.0"
}
